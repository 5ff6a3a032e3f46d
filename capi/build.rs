//! The shared library's SONAME, `libnodeipc.so.<major>`, as distributions
//! ship one: a program linked against `libnodeipc.so` records that name and
//! finds the library by it (install.sh makes the links). The static library
//! has no SONAME; nothing else is set here.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
    if std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnodeipc.so.{major}");
    }
}
