#!/usr/bin/env bash
# Runs before `npm test` (the `pretest` script): the suite drives real programs (curl, Python
# requests/httpx, Chromium, redis-server, promtool, unshare, nsenter, ip and ss for isolation and off-loopback
# peers), and a missing one should stop the run here with the command to fix it, not surface
# as a wall of failing tests. As root on Debian it installs what is missing, as CI does.
# It also installs the coding agents the agent recipes test runs (test/agents, decision 145).
set -euo pipefail
cd "$(dirname "$0")/.."

# The agents: their own package.json and lock, exact versions, from the npm registry; again when
# the lock is newer than the install (npm writes node_modules/.package-lock.json on each install).
# `npm install`, not `npm ci`: the lock lists only the platform packages the registry served when
# it was written (decision 145), and `npm install` follows the lock for everything it lists.
agents=test/agents
if [ ! -f "$agents/node_modules/.package-lock.json" ] || [ "$agents/package-lock.json" -nt "$agents/node_modules/.package-lock.json" ]; then
  echo "test prerequisites: installing the agents in $agents (npm install)" >&2
  npm install --prefix "$agents" --no-audit --no-fund --loglevel=error >/dev/null
  # npm rewrites the lock too, sometimes a moment after its own record: mark the install as the
  # newer of the two, or every later run would install again.
  touch "$agents/node_modules/.package-lock.json"
fi

# Claude Code's sign-in comes back to the fixed port 53692, inside the kernel's range for the
# local ports of outgoing connections. The suite makes many thousands of those, and one that used
# 53692 holds it in TIME_WAIT for a minute, during which `auth add claude-oauth` cannot listen
# there (a test waited 56 s for it in two clean runs of six). As root, keep the agents'
# fixed callback ports out of that range, as a machine that runs these agents would want anyway
# (decision 192).
reserved=/proc/sys/net/ipv4/ip_local_reserved_ports
if [ "$(id -u)" = 0 ] && [ -w "$reserved" ]; then
  for port in 1455 53692; do
    case ",$(cat "$reserved")," in
      *",$port,"*) ;;
      ,,) echo "$port" >"$reserved" 2>/dev/null || true ;;
      *) echo "$(cat "$reserved"),$port" >"$reserved" 2>/dev/null || true ;;
    esac
  done
fi

missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need curl curl
need openssl openssl
need /usr/bin/chromium chromium
need redis-server redis-server
need promtool prometheus
need unshare util-linux
need nsenter util-linux
need ip iproute2
need ss iproute2
/usr/bin/python3 -c 'import requests, httpx' >/dev/null 2>&1 || missing+=(python3 python3-requests python3-httpx)

[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "test prerequisites: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends ca-certificates "${missing[@]}" >/dev/null
  exit 0
fi

echo "The tests need programs this machine does not have: ${missing[*]}." >&2
echo "Install them, then run npm test again:" >&2
echo "  sudo apt-get install ${missing[*]}" >&2
echo "(Debian/Ubuntu package names; other systems have packages of the same programs.)" >&2
exit 1
