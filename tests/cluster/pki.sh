# pki.sh: the cluster's certificates, service-account keys and kubeconfigs, made with openssl.
# One CA signs everything; each client's identity is its certificate's CN (user) and O (group).
# Sourced by `up` after lib.sh; make_pki is a no-op for files that already exist.

# cert NAME CN O SANS USAGE: an EC P-256 key and a CA-signed certificate in $PKI/NAME.{key,crt}.
# SANS is an openssl subjectAltName value or empty; USAGE is serverAuth, clientAuth or both.
cert() {
    local name=$1 cn=$2 org=$3 sans=$4 usage=$5 ext
    [[ -f $PKI/$name.crt ]] && return 0
    ext=$(mktemp)
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$usage"
        [[ -n $sans ]] && echo "subjectAltName=$sans"
    } > "$ext"
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
    openssl req -new -key "$PKI/$name.key" -subj "/CN=$cn${org:+/O=$org}" -out "$PKI/$name.csr"
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
        -CAcreateserial -days 3650 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null \
        || die "signing certificate $name failed"
    rm -f "$ext" "$PKI/$name.csr"
}

# kubeconfig FILE NAME: a kubeconfig for $APISERVER authenticating with $PKI/NAME.{crt,key}.
kubeconfig() {
    local file=$1 name=$2
    cat > "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: stepshim
  cluster:
    server: $APISERVER
    certificate-authority-data: $(base64 -w0 < "$PKI/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 < "$PKI/$name.crt")
    client-key-data: $(base64 -w0 < "$PKI/$name.key")
contexts:
- name: stepshim
  context: {cluster: stepshim, user: $name}
current-context: stepshim
EOF
    chmod 600 "$file"
}

make_pki() {
    mkdir -p "$PKI"
    chmod 700 "$PKI"
    if [[ ! -f $PKI/ca.crt ]]; then
        openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/ca.key" 2>/dev/null
        openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=stepshim-cluster-ca" -days 3650 \
            -sha256 -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$PKI/ca.crt" \
            || die "creating the CA failed"
    fi

    local api_sans="IP:127.0.0.1,IP:$BRIDGE_IP,IP:$SERVICE_IP,DNS:localhost,DNS:$NODE_NAME"
    api_sans+=",DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
    api_sans+=",DNS:kubernetes.default.svc.cluster.local"
    cert kube-apiserver kube-apiserver "" "$api_sans" serverAuth
    # The apiserver's identity toward kubelets (exec, logs, port-forward); system:masters keeps
    # the kubelet's webhook authorization trivially satisfied.
    cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters "" clientAuth
    cert kubelet "system:node:$NODE_NAME" system:nodes "IP:$NODE_IP,IP:127.0.0.1,DNS:$NODE_NAME" \
        serverAuth,clientAuth
    cert kube-controller-manager system:kube-controller-manager "" "" clientAuth
    cert kube-scheduler system:kube-scheduler "" "" clientAuth
    cert admin stepshim-admin system:masters "" clientAuth

    # Service-account token signing pair: the apiserver signs and verifies, the
    # controller-manager signs the legacy token secrets.
    if [[ ! -f $PKI/sa.key ]]; then
        openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null || die "creating sa.key failed"
        openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    fi

    kubeconfig "$STATE/admin.kubeconfig" admin
    kubeconfig "$STATE/kubelet.kubeconfig" kubelet
    kubeconfig "$STATE/kube-controller-manager.kubeconfig" kube-controller-manager
    kubeconfig "$STATE/kube-scheduler.kubeconfig" kube-scheduler
}
