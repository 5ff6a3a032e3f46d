//! Compiles `proto/proto/*.proto` with protox (pure Rust, no `protoc`) into
//! serialized file descriptors that the extension module carries
//! (`_native.FILE_DESCRIPTORS`); `nodeipc.proto.*_pb2` build their message
//! classes from them with protobuf's Python runtime, as the modules
//! `protoc --python_out` writes do. So the classes always match the
//! contract the Rust crates were built from, and nothing generated lives in
//! the source tree.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use prost::Message;

const PROTOS: [&str; 3] = ["execute.proto", "handshake.proto", "monitor.proto"];

fn main() -> ExitCode {
    match generate() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("nodeipc-python: compiling the .proto files failed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn generate() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let include = manifest.join("../proto/proto");
    println!("cargo:rerun-if-changed={}", include.display());
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let set = protox::compile(PROTOS, [&include])?;
    let mut list = String::from("&[\n");
    for mut file in set.file {
        // protoc leaves the comments and positions out of what it embeds.
        file.source_code_info = None;
        let name = file.name().to_owned();
        let bin = out.join(format!("{name}.bin"));
        std::fs::write(&bin, file.encode_to_vec())?;
        writeln!(list, "    ({name:?}, include_bytes!({:?})),", bin.display())?;
    }
    list.push(']');
    std::fs::write(out.join("descriptors.rs"), list)?;
    Ok(())
}
