"""The hardening corpus (issue 44): bad inputs of every kind kmemsim meets, each with the one-line
message it must give (cases.py), and the files they need, made fresh per session (inputs.py)."""
