#!/bin/sh
# meson install step: puts the sample configuration at <sysconfdir>/ebb/ebb.conf unless a file
# is already there (a reinstall must not overwrite the administrator's settings); then the new
# sample goes next to it as ebb.conf.new.
#   install-conf.sh SAMPLE SYSCONFDIR
set -eu
sample=$1
dir="${DESTDIR:-}$2/ebb"
mkdir -p "$dir"
if [ -e "$dir/ebb.conf" ]; then
    install -m 0644 "$sample" "$dir/ebb.conf.new"
    echo "kept existing $dir/ebb.conf; the new sample is $dir/ebb.conf.new"
else
    install -m 0644 "$sample" "$dir/ebb.conf"
    echo "installed $dir/ebb.conf"
fi
