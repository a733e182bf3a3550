#!/bin/sh
# Entrypoint of the Mosquitto container (docker-compose.yml). Mosquitto reads hashed
# passwords only, so this writes them from the environment at every start, then replaces
# itself with the broker:
#   - the password file (path: `password_file` in the config) with the service account
#     `device-registry` (MQTT_SERVICE_PASSWORD) and the administrator `broker-admin`
#     (MQTT_ADMIN_PASSWORD), rewritten at each start so a changed password takes effect;
#   - the dynamic-security file (path: `plugin_opt_config_file`), only when it does not exist
#     yet: it lives on the data volume and holds the device accounts, which the service keeps in
#     step with its device credentials (MQTT_DYNAMIC_SECURITY).
# Usage: entrypoint.sh [config file], default /mosquitto/config/mosquitto.conf.
set -eu

conf="${1:-/mosquitto/config/mosquitto.conf}"

fail() {
  echo "mosquitto entrypoint: $*" >&2
  exit 2
}

# The last value of an option in the config file.
option() {
  sed -n "s/^[[:space:]]*$1[[:space:]][[:space:]]*//p" "$conf" | tail -n 1 | sed 's/[[:space:]]*$//'
}

[ -r "$conf" ] || fail "cannot read $conf"
[ -n "${MQTT_SERVICE_PASSWORD:-}" ] || fail "MQTT_SERVICE_PASSWORD must be set"
[ -n "${MQTT_ADMIN_PASSWORD:-}" ] || fail "MQTT_ADMIN_PASSWORD must be set"

passwd_file="$(option password_file)"
dynsec_file="$(option plugin_opt_config_file)"
[ -n "$passwd_file" ] || fail "$conf has no password_file"
[ -n "$dynsec_file" ] || fail "$conf has no plugin_opt_config_file"

umask 077
mkdir -p "$(dirname "$passwd_file")" "$(dirname "$dynsec_file")"

tmp="$passwd_file.new"
rm -f "$tmp"
: > "$tmp"
mosquitto_passwd -b "$tmp" device-registry "$MQTT_SERVICE_PASSWORD"
mosquitto_passwd -b "$tmp" broker-admin "$MQTT_ADMIN_PASSWORD"
mv -f "$tmp" "$passwd_file"

if [ ! -s "$dynsec_file" ]; then
  # No clients, roles or groups yet; default access "deny" everywhere, which makes the plugin
  # defer every topic decision to the acl file.
  cat > "$dynsec_file" <<'JSON'
{
  "clients": [],
  "groups": [],
  "roles": [],
  "defaultACLAccess": {
    "publishClientSend": false,
    "publishClientReceive": false,
    "subscribe": false,
    "unsubscribe": false
  }
}
JSON
fi

# Started as root, mosquitto drops to the `mosquitto` user before it reads these files and
# must be able to rewrite the dynamic-security file.
if [ "$(id -u)" = 0 ] && id mosquitto >/dev/null 2>&1; then
  chown mosquitto:mosquitto "$(dirname "$passwd_file")" "$passwd_file" "$(dirname "$dynsec_file")" "$dynsec_file"
  persistence_dir="$(option persistence_location)"
  if [ -n "$persistence_dir" ]; then
    mkdir -p "$persistence_dir"
    chown mosquitto:mosquitto "$persistence_dir"
  fi
fi

exec mosquitto -c "$conf"
