#!/bin/sh
# Installs ebb as a per-user LaunchAgent (label org.ebb.server) and starts it:
# fills in the plist template, writes ~/Library/LaunchAgents/org.ebb.server.plist and loads it
# with `launchctl bootstrap gui/$UID`. Running it again replaces and restarts the agent.
#
#   install.sh [--bin PATH] [--template PATH] [--no-load] [--print]
#
#   --bin PATH       the ebb binary (default: <prefix>/bin/ebb next to this script's
#                    <prefix>/share/ebb, else `command -v ebb`)
#   --template PATH  the plist template (default: org.ebb.server.plist next to this script)
#   --no-load        write the plist but do not call launchctl
#   --print          print the filled-in plist to stdout and change nothing
set -eu

LABEL=org.ebb.server
here=$(cd "$(dirname "$0")" && pwd)
bin=""
template="$here/$LABEL.plist"
load=1
print=0

while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=$2; shift 2 ;;
    --template) template=$2; shift 2 ;;
    --no-load) load=0; shift ;;
    --print) print=1; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done

if [ -z "$bin" ]; then
    if [ -x "$here/../../bin/ebb" ]; then
        bin=$(cd "$here/../../bin" && pwd)/ebb
    else
        bin=$(command -v ebb || true)
    fi
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "install.sh: cannot find the ebb binary; pass --bin /path/to/ebb" >&2
    exit 1
fi
case "$bin" in
/*) ;;
*) bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin") ;;
esac
[ -r "$template" ] || { echo "install.sh: no template at $template" >&2; exit 1; }
[ -n "${HOME:-}" ] || { echo "install.sh: HOME is not set" >&2; exit 1; }

log_dir="$HOME/Library/Logs/ebb"
agents="$HOME/Library/LaunchAgents"
dest="$agents/$LABEL.plist"

# A path goes into XML text and into a sed replacement: escape for both.
esc() {
    printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' \
        -e 's/[\\|&]/\\&/g'
}

fill() {
    sed -e "s|@EBB_BIN@|$(esc "$bin")|g" -e "s|@HOME@|$(esc "$HOME")|g" \
        -e "s|@LOG_DIR@|$(esc "$log_dir")|g" "$template"
}

if [ "$print" = 1 ]; then
    fill
    exit 0
fi

mkdir -p "$agents" "$log_dir"
tmp="$dest.tmp.$$"
trap 'rm -f "$tmp"' EXIT
fill > "$tmp"
if command -v plutil >/dev/null 2>&1; then
    plutil -lint -s "$tmp"
fi

uid=$(id -u)
if [ "$load" = 1 ] && command -v launchctl >/dev/null 2>&1; then
    # Replace a running agent: bootstrap fails while the label is still loaded.
    launchctl bootout "gui/$uid/$LABEL" 2>/dev/null || true
fi
mv "$tmp" "$dest"
trap - EXIT
echo "wrote $dest (ebb: $bin, log: $log_dir/ebb.log)"

if [ "$load" = 1 ]; then
    if ! command -v launchctl >/dev/null 2>&1; then
        echo "install.sh: launchctl not found (not macOS?); the plist is written but not loaded" >&2
        exit 1
    fi
    launchctl enable "gui/$uid/$LABEL"
    launchctl bootstrap "gui/$uid" "$dest"
    echo "loaded $LABEL; check with: launchctl print gui/$uid/$LABEL"
    echo "API: http://127.0.0.1:8077/v1/ (health: curl http://127.0.0.1:8077/health)"
fi
