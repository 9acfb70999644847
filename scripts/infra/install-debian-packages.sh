#!/usr/bin/env bash
# Installs the Debian packages the real-Docker tests need (dockerd, a registry, busybox for a
# base image, debootstrap for a Python base image), the real-browser tests need (chromium) and
# the Slurm tests need (controller, node daemon, client commands, slurmdbd with MariaDB for sacct).
# Idempotent; does nothing when all are there.
# No package's own service is started (registry, MariaDB, munge, Slurm): tests run their own,
# privately, on 127.0.0.1.
set -euo pipefail
need=()
pkgs=(docker.io docker-registry busybox-static debootstrap chromium
  slurmctld slurmd slurm-client slurmdbd mariadb-server)
# Node.js and npm build the JupyterLab extension; a machine with its own Node keeps it.
command -v npm >/dev/null || pkgs+=(nodejs npm)
for pkg in "${pkgs[@]}"; do
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
# Keep package scripts from starting services (dockerd, the registry, MariaDB...) during the install.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
# Another apt (an unattended upgrade, a second test run) may hold the dpkg or lists lock: wait
# for it (up to 15 minutes) instead of failing at once.
LOCK_WAIT=(-o DPkg::Lock::Timeout=900)
for attempt in $(seq 1 90); do
  if apt-get "${LOCK_WAIT[@]}" update -qq 2>/tmp/apt-update.$$; then
    break
  fi
  if ! grep -qi "lock" /tmp/apt-update.$$ || [ "$attempt" = 90 ]; then
    cat /tmp/apt-update.$$ >&2
    exit 1
  fi
  echo "install-debian-packages: apt is locked by another process; waiting" >&2
  sleep 10
done
rm -f /tmp/apt-update.$$
DEBIAN_FRONTEND=noninteractive apt-get "${LOCK_WAIT[@]}" install -y -qq --no-install-recommends "${need[@]}" >/dev/null
