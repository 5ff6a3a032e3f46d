//! With the feature `etcd`: the etcd v3 gRPC client, generated from the
//! subset of etcd's `.proto` files in `proto/etcd`, parsed with protox
//! (pure Rust), so that no `protoc` binary is needed.

fn main() {
    #[cfg(feature = "etcd")]
    etcd::generate();
}

#[cfg(feature = "etcd")]
mod etcd {
    pub(super) fn generate() {
        println!("cargo:rerun-if-changed=proto/etcd");
        let fds = match protox::compile(["rpc.proto", "kv.proto"], ["proto/etcd"]) {
            Ok(fds) => fds,
            Err(error) => panic!("nodeipc-launch: parsing proto/etcd failed: {error}"),
        };
        if let Err(error) = tonic_prost_build::configure()
            .build_server(false)
            .build_transport(false)
            .compile_fds(fds)
        {
            panic!("nodeipc-launch: generating the etcd client failed: {error}");
        }
    }
}
