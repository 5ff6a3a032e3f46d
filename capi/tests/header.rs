//! The checked-in `include/nodeipc.h` is what cbindgen makes of the sources
//! now: a C program never compiles against a stale header.
//! `NODEIPC_BLESS=1 cargo test -p nodeipc-capi --test header` rewrites it.

use std::path::Path;

#[test]
fn checked_in_header_matches_a_fresh_generation() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("read capi/cbindgen.toml");
    let mut fresh = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut fresh);
    let path = crate_dir.join("include/nodeipc.h");
    if std::env::var_os("NODEIPC_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/nodeipc.h");
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "capi/include/nodeipc.h is stale: regenerate it with \
         NODEIPC_BLESS=1 cargo test -p nodeipc-capi --test header"
    );
}
