#!/usr/bin/env bash
# Installs Debian's Nsight Systems 2022.4 (non-free) so the end-to-end tests that run `nsys`
# can run; they skip cleanly where nsys is absent. Safe to run twice.
set -u
command -v nsys >/dev/null 2>&1 && exit 0
[ "$(id -u)" = 0 ] || { echo "install-nsys: not root, skipping"; exit 0; }
if ! grep -rqs "non-free" /etc/apt/sources.list /etc/apt/sources.list.d/; then
  cat > /etc/apt/sources.list.d/specprof-nonfree.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
apt-get update -qq >/dev/null 2>&1 || true
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nsight-systems nsight-systems-target >/dev/null 2>&1 \
  || { echo "install-nsys: apt could not install nsight-systems; nsys tests will skip"; exit 0; }
host=/usr/lib/nsight-systems/host-linux-x64
link=/usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64
[ -e "$link" ] || ln -s "$host" "$link"
nsys --version
