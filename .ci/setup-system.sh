#!/usr/bin/env bash
# System set-up kmemsim needs: Debian's bcc (python3-bpfcc), bpftrace, fio (`kmemsim profile`'s flash
# table), kernel headers linked where
# bcc looks for them, and tracefs. Idempotent; run by `make setup` (root). Not root: says so and
# carries on (the emulator needs none of this; the recorder will refuse to start).
set -u
if [ "$(id -u)" != 0 ]; then
  echo "kmemsim setup: not root, skipping apt packages and kernel headers (the recorder needs them)" >&2
  exit 0
fi
need=()
for p in python3-bpfcc bpfcc-tools bpftrace fio linux-headers-amd64 chromium; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# `kmemsim vm` (docs/vm.md): qemu, Debian 12's 6.1 kernel (linux-image-amd64 is 6.1 on bookworm; its
# /lib/modules has zram, 9p, virtio) and busybox (virtme-ng's initramfs); linux-headers-amd64 above is
# the guest's too (/lib/modules/<6.1 release>/build, for bcc). Without recommends: qemu's would add
# a desktop's codecs and GL. e2fsprogs: `kmemsim vm disk` (mke2fs -d); cmake and g++: `make guest-llama`.
vm=()
for p in qemu-system-x86 linux-image-amd64 busybox-static e2fsprogs cmake g++; do
  dpkg -s "$p" >/dev/null 2>&1 || vm+=("$p")
done
if [ ${#vm[@]} -gt 0 ]; then
  [ ${#need[@]} -gt 0 ] || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${vm[@]}" >/dev/null
fi
# bcc compiles at load time against /lib/modules/$(uname -r)/build; this kernel ships no headers,
# Debian's (older) ones serve tracepoint-only programs, which read no kernel struct layouts.
mod=/lib/modules/$(uname -r)
if [ ! -e "$mod/build/include" ]; then
  hdr=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1)
  common=$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$hdr" ]; then
    mkdir -p "$mod"
    ln -sfn "$hdr" "$mod/build"
    [ -n "$common" ] && ln -sfn "$common" "$mod/source"
  fi
fi
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
exit 0
