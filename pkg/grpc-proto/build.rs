//! Generates the messages and tonic services of Parca's API from `proto/` (protox parses the
//! files in Rust: no `protoc` on the machine).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "parca/query/v1alpha1/query.proto",
        "parca/profilestore/v1alpha1/profilestore.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(files, ["proto"])?;
    // The descriptors themselves, for Connect's JSON (transcoding by reflection).
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("parca_api.fds"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(false)
        .build_transport(false)
        .include_file("parca_api.rs")
        .compile_fds(descriptors)?;
    Ok(())
}
