#!/usr/bin/env bash
# Installs the Debian packages the real-Docker tests need (dockerd, a registry, busybox for a
# base image, debootstrap for a Python base image). Idempotent; does nothing when all are there.
# The registry package's own service is never started: tests run their own on 127.0.0.1.
set -euo pipefail
need=()
for pkg in docker.io docker-registry busybox-static debootstrap; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-debian-packages: need root to install: ${need[*]}" >&2
  exit 1
fi
echo "install-debian-packages: installing ${need[*]}" >&2
# Keep package scripts from starting services (dockerd, the registry) during the install.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
