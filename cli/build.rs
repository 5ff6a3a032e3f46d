//! Builds the C++ side of `nodeipc bench`'s KittensBroker row
//! (`cpp/kittens_bench.cpp`: our `kittens::KittensBroker` from
//! capi/include, and the seed's sense-reversing barrier) with the `cc`
//! crate, here where the row runs. Without a C++ compiler the row is left
//! out and says why (cfg `nodeipc_no_cxx`); everything else builds and runs.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(nodeipc_no_cxx)");
    println!("cargo::rerun-if-changed=cpp/kittens_bench.cpp");
    println!("cargo::rerun-if-changed=../capi/include");
    let built = cc::Build::new()
        .cpp(true)
        .std("c++17")
        .include("../capi/include")
        .file("cpp/kittens_bench.cpp")
        .warnings(true)
        .cargo_warnings(false)
        .try_compile("nodeipc_kittens_bench");
    if let Err(e) = built {
        let reason = e.to_string().replace(['\n', '\r'], " ");
        println!("cargo::warning=no C++ compiler for the KittensBroker bench row: {reason}");
        println!("cargo::rustc-cfg=nodeipc_no_cxx");
        println!("cargo::rustc-env=NODEIPC_NO_CXX_REASON={reason}");
    }
}
