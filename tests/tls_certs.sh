#!/bin/sh
# Makes the certificates of tests/test_tls.c in DIR with the openssl CLI:
#   ca.pem/ca.key            the test CA
#   server.pem/server.key    tsdfd, SAN IP:127.0.0.1, DNS:localhost and
#                            DNS:127.0.0.1 (mbedTLS 2.28 checks a server name
#                            against DNS names only, also for an IP URL)
#   robot1.pem/.key          client CN=robot1 (a writer in the test)
#   viewer.pem/.key          client CN=viewer (read-only in the test)
#   other-ca.pem, stranger.pem/.key   a client of a different CA
#   expired.pem/.key         client CN=robot1 of the test CA, valid only in 2020
# EC P-256 keys: quick to make, and mbedTLS 2.28 verifies them.
#   tls_certs.sh DIR
set -eu
DIR=${1:?directory}
mkdir -p "$DIR"
cd "$DIR"
OPENSSL=${OPENSSL:-openssl}
days=30

key() { "$OPENSSL" genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

ca() { # name cn
    key "$1.key"
    "$OPENSSL" req -x509 -new -key "$1.key" -subj "/CN=$2" -days $days -out "$1.pem" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign"
}

leaf() { # name cn ca ext
    key "$1.key"
    "$OPENSSL" req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
    printf '%s\n' "$4" >"$1.ext"
    "$OPENSSL" x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial \
        -days $days -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}

client_ext='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth'

ca ca tsdf-test-ca
ca other-ca tsdf-other-ca
leaf server tsdfd ca 'basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:127.0.0.1'
leaf robot1 robot1 ca "$client_ext"
leaf viewer viewer ca "$client_ext"
leaf stranger robot1 other-ca "$client_ext"

# OpenSSL 3.0's x509 -req cannot start a certificate in the past; `openssl
# ca` can (-startdate/-enddate) with a small throw-away database.
key expired.key
"$OPENSSL" req -new -key expired.key -subj "/CN=robot1" -out expired.csr
mkdir -p ca.db
: >ca.db/index.txt
printf '%s\n' "$client_ext" >expired.ext
cat >ca.cnf <<CNF
[ca]
default_ca = test
[test]
database = ca.db/index.txt
new_certs_dir = ca.db
serial = ca.db/serial
certificate = ca.pem
private_key = ca.key
default_md = sha256
policy = any
[any]
commonName = supplied
CNF
echo 1000 >ca.db/serial
"$OPENSSL" ca -batch -config ca.cnf -startdate 20200101000000Z -enddate 20200201000000Z \
    -extfile expired.ext -notext -in expired.csr -out expired.pem 2>/dev/null
chmod 600 ./*.key
