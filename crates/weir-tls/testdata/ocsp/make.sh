#!/usr/bin/env bash
# Makes the OCSP fixtures of crates/weir-tls/src/ocsp.rs's tests with OpenSSL: a CA, two
# leaves it signed, and OCSP responses about them (good, revoked, and one response about
# the other leaf). Everything is valid for 100 years so the fixtures do not age; the
# responses are signed by the CA itself. Run it again only to change the fixtures.
set -euo pipefail
cd "$(dirname "$0")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
days=36500
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
    -subj "/CN=weir test OCSP CA" -keyout "$work/ca.key" -out ca.pem 2>/dev/null
leaf() { # name serial
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj "/CN=$1" -keyout "$1.key" -out "$work/$1.csr" 2>/dev/null
    printf 'subjectAltName=DNS:%s\n' "$1" > "$work/$1.ext"
    openssl x509 -req -in "$work/$1.csr" -CA ca.pem -CAkey "$work/ca.key" -set_serial "$2" \
        -days "$days" -extfile "$work/$1.ext" -out "$work/$1.leaf" 2>/dev/null
    # The chain file: leaf, then the CA (as an operator's fullchain.pem).
    cat "$work/$1.leaf" ca.pem > "$1.pem"
}
leaf good.test 4097
leaf revoked.test 4098
expiry=$(date -u -d "+$days days" +%y%m%d%H%M%SZ)
revoked_at=$(date -u +%y%m%d%H%M%SZ)
printf 'V\t%s\t\t1001\tunknown\t/CN=good.test\n' "$expiry" > "$work/index.txt"
printf 'R\t%s\t%s\t1002\tunknown\t/CN=revoked.test\n' "$expiry" "$revoked_at" >> "$work/index.txt"
respond() { # leaf out
    openssl ocsp -issuer ca.pem -cert "$work/$1.leaf" -no_nonce -reqout "$work/req.der" >/dev/null
    openssl ocsp -index "$work/index.txt" -rsigner ca.pem -rkey "$work/ca.key" -CA ca.pem \
        -reqin "$work/req.der" -respout "$2" -ndays "$days" >/dev/null 2>&1
}
respond good.test good.ocsp
respond revoked.test revoked.ocsp
# The same request asked with SHA-256 for the CertID's hashes.
openssl ocsp -sha256 -issuer ca.pem -cert "$work/good.test.leaf" -no_nonce \
    -reqout "$work/req.der" >/dev/null
openssl ocsp -index "$work/index.txt" -rsigner ca.pem -rkey "$work/ca.key" -CA ca.pem \
    -reqin "$work/req.der" -respout good-sha256.ocsp -ndays "$days" >/dev/null 2>&1
# A responder that answers tryLater, not a response.
printf '\x30\x03\x0a\x01\x03' > trylater.ocsp
