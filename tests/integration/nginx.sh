#!/bin/sh
# The nginx test (test_nginx.py) through run.sh, skipped (77) when nginx is not installed.
here=$(cd "$(dirname "$0")" && pwd)
nginx=${EBB_NGINX:-$(command -v nginx || true)}
for c in /usr/sbin/nginx /usr/local/sbin/nginx; do
    [ -n "$nginx" ] || { [ -x "$c" ] && nginx=$c; }
done
if [ -z "$nginx" ]; then
    echo "nginx is not installed (scripts/setup-deps.sh installs it; or set EBB_NGINX): skipped"
    exit 77
fi
export EBB_NGINX="$nginx"
exec "$here/run.sh" "$@"
