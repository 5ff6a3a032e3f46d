//! Declares the `loom` cfg the models build with.

fn main() {
    // The loom models build this crate with RUSTFLAGS="--cfg loom".
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
