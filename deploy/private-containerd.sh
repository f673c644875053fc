# Sourced by demo.sh and linkorder/profile.sh: the config of a private
# containerd under $1 (root, state and sockets there; CRI off), on stdout.
private_containerd_config() {
    cat <<CFG
version = 2
root = "$1/root"
state = "$1/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$1/c.sock"
[ttrpc]
  address = "$1/c.sock.ttrpc"
CFG
}
