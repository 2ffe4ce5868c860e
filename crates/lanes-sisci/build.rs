//! Gives libsisci.so the soname `libsisci.so`, so that `ldconfig` registers it by that name.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libsisci.so");
    println!("cargo:rerun-if-changed=build.rs");
}
