//! Finds the system libfabric (>= 1.17) with pkg-config and compiles the C shim against it.
//!
//! Most of libfabric's API is `static inline` in `<rdma/*.h>`, so Rust cannot link to it;
//! `src/shim.c` wraps each inline function we use in an exported `lanes_fi_*` function.
//! libfabric itself is loaded by the shim at first use (`dlopen`), not linked: only its
//! headers are needed here.

fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    let lib = match pkg_config::Config::new().atleast_version("1.17").cargo_metadata(false).probe("libfabric") {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!(
                "lanes-ofi-sys needs libfabric >= 1.17 and its pkg-config file \
                 (Debian: apt-get install libfabric-dev pkg-config): {e}"
            );
            std::process::exit(1);
        }
    };
    let mut build = cc::Build::new();
    build.file("src/shim.c").warnings(true).extra_warnings(true).flag_if_supported("-Wno-unused-parameter");
    for dir in &lib.include_paths {
        build.include(dir);
    }
    build.compile("lanes_ofi_shim");
    println!("cargo:rustc-link-lib=dl");
}
