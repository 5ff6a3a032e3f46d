"""Protocol buffer modules generated at build time from the crate's .proto files."""
