"""Options several commands share, defined once."""
import click

kv_manager = click.option(
    "--kv-manager", default=None, metavar="NAME",
    help="who keeps the KV cache: a manager registered in kmemsim.engine.managers "
         "[default: llamacpp, llama.cpp's own]")
