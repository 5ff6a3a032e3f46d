//! Compiles `proto/*.proto` into Rust with prost, parsing them with protox
//! (pure Rust): no `protoc` binary is needed and nothing is downloaded.

use std::process::ExitCode;

#[path = "build/schema.rs"]
mod schema;

/// The contract files, relative to the include directory `proto/`.
const PROTOS: [&str; 3] = ["execute.proto", "handshake.proto", "monitor.proto"];

fn main() -> ExitCode {
    println!("cargo:rerun-if-changed=proto");
    match generate() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("nodeipc-proto: generating code from proto/ failed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn generate() -> Result<(), Box<dyn std::error::Error>> {
    let fds = protox::compile(PROTOS, ["proto"])?;
    let schema = schema::generate(&fds)?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("schema.rs"), schema)?;
    write_descriptors(&fds, &out)?;
    prost_build::Config::new()
        // Maps as `BTreeMap`: the same message always encodes to the same bytes.
        .btree_map(["."])
        // Payloads as `Bytes`: a receiver that copies a large frame out of
        // shared memory once decodes it without copying (or allocating) again.
        .bytes([".nodeipc.execute.v1"])
        .compile_fds(fds)?;
    Ok(())
}

/// Each file's serialized `FileDescriptorProto`, without comments and
/// positions (as `protoc` embeds them), for `nodeipc_proto::FILE_DESCRIPTORS`:
/// what a protobuf runtime of another language builds its classes from.
fn write_descriptors(
    fds: &prost_types::FileDescriptorSet,
    out: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    use prost::Message;
    use std::fmt::Write as _;
    let mut list = String::from("&[\n");
    for file in &fds.file {
        let mut file = file.clone();
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
