#!/bin/sh
# Stops and removes the ebb LaunchAgent (label org.ebb.server) installed by install.sh.
# Models, ~/.config/ebb and the log in ~/Library/Logs/ebb are kept unless --purge-logs is given.
#
#   uninstall.sh [--purge-logs]
set -eu

LABEL=org.ebb.server
purge=0
while [ $# -gt 0 ]; do
    case "$1" in
    --purge-logs) purge=1; shift ;;
    -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "uninstall.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done
[ -n "${HOME:-}" ] || { echo "uninstall.sh: HOME is not set" >&2; exit 1; }

dest="$HOME/Library/LaunchAgents/$LABEL.plist"
uid=$(id -u)
if command -v launchctl >/dev/null 2>&1; then
    # bootout sends SIGTERM, so in-flight requests get ebb's shutdown grace.
    if launchctl bootout "gui/$uid/$LABEL" 2>/dev/null; then
        echo "stopped $LABEL"
    else
        echo "$LABEL was not loaded"
    fi
fi
if [ -e "$dest" ]; then
    rm -f "$dest"
    echo "removed $dest"
fi
if [ "$purge" = 1 ]; then
    rm -rf "$HOME/Library/Logs/ebb"
    echo "removed $HOME/Library/Logs/ebb"
fi
