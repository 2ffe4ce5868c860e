//! A failed call is its thread's last failure: it names the exported function, keeps the
//! fabric's message, and `SCIGetErrorString` gives that message for its code (only on that
//! thread, only for that code). One test: it sets LANES_DIR and LANES_NODE_ID for the
//! whole process.

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

use sisci::consts::*;
use sisci::error::last_failure;

fn string(code: SciError) -> String {
    // SAFETY: SCIGetErrorString takes any code and returns a NUL-terminated string.
    unsafe { CStr::from_ptr(sisci::SCIGetErrorString(code)) }.to_string_lossy().into_owned()
}

#[test]
fn failures_name_their_function_and_keep_their_message_per_thread() {
    let dir = std::env::temp_dir().join(format!("lanes-sisci-failures-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var("LANES_DIR", &dir);
    std::env::set_var("LANES_NODE_ID", "4");
    std::env::remove_var("LANES_CONFIG");
    let mut err: SciError = SCI_ERR_OK;

    // A failure without a message: the fixed string.
    let mut sd: *mut c_void = null_mut();
    // SAFETY: valid out-parameters.
    unsafe { sisci::SCIOpen(&mut sd, 0, &mut err) };
    assert_eq!(err, SCI_ERR_NOT_INITIALIZED);
    let f = last_failure().expect("a failure");
    assert_eq!((f.code, f.function, f.message.as_deref()), (SCI_ERR_NOT_INITIALIZED, "SCIOpen", None));
    assert_eq!(string(SCI_ERR_NOT_INITIALIZED), sisci::error::string_of(SCI_ERR_NOT_INITIALIZED).to_str().unwrap());

    // SAFETY: valid out-parameters.
    unsafe {
        sisci::SCIInitialize(0, &mut err);
        assert_eq!(err, SCI_ERR_OK);
        sisci::SCIOpen(&mut sd, 0, &mut err);
        assert_eq!(err, SCI_ERR_OK);
    }

    // A corrupt object file: SCI_ERR_SYSTEM with the file and the reason.
    let file = dir.join("nodes/8/seg-00000005");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, vec![0xAB_u8; 8192]).unwrap();
    let mut rs: *mut c_void = null_mut();
    // SAFETY: valid handle and out-parameters; no callback.
    unsafe { sisci::mt_aliases::SCIConnectSegment(sd, &mut rs, 8, 5, 0, None, null_mut(), 0, 0, &mut err) };
    assert_eq!(err, SCI_ERR_SYSTEM);
    let f = last_failure().expect("a failure");
    assert_eq!(f.function, "SCIConnectSegment");
    let message = f.message.expect("a message");
    assert!(message.contains(&file.display().to_string()) && message.contains("bad magic"), "{message}");
    let s = string(SCI_ERR_SYSTEM);
    assert_eq!(s, format!("System error: {message}"));
    // Stable while nothing else fails; other codes keep their fixed strings.
    // SAFETY: SCIGetErrorString takes any code.
    let (a, b) = unsafe { (sisci::SCIGetErrorString(SCI_ERR_SYSTEM), sisci::SCIGetErrorString(SCI_ERR_SYSTEM)) };
    assert_eq!(a, b);
    assert_eq!(string(SCI_ERR_TIMEOUT), "The operation timed out");
    // Another thread has its own last failure (none).
    let other = std::thread::spawn(|| (string(SCI_ERR_SYSTEM), last_failure())).join().unwrap();
    assert_eq!(other, ("System error".to_string(), None));

    // A failure with the fabric's message through a helper shared by two functions.
    let mut ri: *mut c_void = null_mut();
    // SAFETY: valid handle and out-parameters.
    unsafe { sisci::SCIConnectDataInterrupt(sd, &mut ri, 8, 0, 3, 0, 0, &mut err) };
    let f = last_failure().expect("a failure");
    assert_eq!((f.code, f.function), (err, "SCIConnectDataInterrupt"));
    assert!(f.message.is_some(), "{f:?}");
    // The older message is gone with the newer failure.
    assert_eq!(string(SCI_ERR_SYSTEM), "System error");

    // SAFETY: the descriptor is open and owns nothing.
    unsafe {
        sisci::SCIClose(sd, 0, &mut err);
        assert_eq!(err, SCI_ERR_OK);
        sisci::SCITerminate();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
