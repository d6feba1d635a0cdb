# Sourced by the cluster tests that talk to a pod's shim by hand (curl): the TLS seed and pin that
# stepctl derives from a pod token (PROTOCOL.md 1.1), computed here with openssl, an implementation
# of its own, so a test that pins with them also checks stepctl's derivation.
#   tls_seed TOKEN    64 hex: HMAC-SHA256(TOKEN, "stepshim tls seed v1")
#   tls_pin TOKEN     64 hex: the Ed25519 public key of that seed
#   curl_tls TOKEN    curl options that pin that key (and check no certificate authority or name)
hex2bin() { printf '%b' "$(sed 's/../\\x&/g')"; }
tls_seed() {
    printf '%s' "stepshim tls seed v1" | openssl dgst -sha256 -mac HMAC -macopt "key:$1" | awk '{print $NF}'
}
tls_pin() {
    # PKCS #8 of the seed (RFC 8410's fixed prefix), its public key as SPKI DER, whose last 32 bytes are the key.
    printf '302e020100300506032b657004220420%s' "$(tls_seed "$1")" | hex2bin \
        | openssl pkey -inform DER -pubout -outform DER | tail -c 32 | od -An -tx1 -v | tr -d ' \n'
}
curl_tls() {
    local spki
    spki=$(printf '302a300506032b6570032100%s' "$(tls_pin "$1")" | hex2bin | openssl dgst -sha256 -binary | base64)
    printf -- '-k --pinnedpubkey sha256//%s' "$spki"
}
