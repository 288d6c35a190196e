#!/bin/sh
# make-certs.sh DIR NAME_OR_IP...: a CA and a server certificate for a TLS Redis that other
# machines reach by the names or addresses given (each goes in the certificate's
# subjectAltName, where clients check it). Writes DIR/ca.crt (copy it to every joining
# machine), DIR/ca.key, DIR/redis.crt and DIR/redis.key (the server's; keep them there),
# all 0600 but ca.crt. Needs openssl.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 DIR NAME_OR_IP..." >&2; exit 2; }
dir=$1; shift
mkdir -p "$dir"
umask 077
san=""
for name in "$@"; do
  case $name in
    *[!0-9.]*) kind=DNS ;;
    *) kind=IP ;;
  esac
  san="${san:+$san,}$kind:$name"
done
openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=inbox store CA" \
  -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=$1" \
  -keyout "$dir/redis.key" -out "$dir/redis.csr" 2>/dev/null
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
  "$san" > "$dir/redis.ext"
openssl x509 -req -in "$dir/redis.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
  -CAcreateserial -days 825 -extfile "$dir/redis.ext" -out "$dir/redis.crt" 2>/dev/null
rm -f "$dir/redis.csr" "$dir/redis.ext" "$dir/ca.srl"
chmod 644 "$dir/ca.crt"
echo "$dir/ca.crt $dir/redis.crt $dir/redis.key"
