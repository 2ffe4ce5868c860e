//! Where results go: tables to standard output, JSON to a file or to standard output.

/// Writes to standard output; a reader that went away (`| head`) just ends the output.
pub(crate) fn say(text: &str) -> Result<(), String> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("writing the output: {e}")),
        _ => Ok(()),
    }
}

/// A benchmark's results as `emit` takes them: serialized for `--json`, printed as a table
/// otherwise. (`lanes bench`'s path comparison and `bench sockets` print progress and file
/// names around their JSON, so they write their own.)
pub(crate) trait Report: serde::Serialize {
    /// Prints the table to standard output.
    fn print_table(&self);
}

/// Prints the table, and the JSON to a file or (`-`) to standard output instead.
pub(crate) fn emit(report: &impl Report, json: Option<&std::path::Path>) -> Result<(), String> {
    match json {
        Some(p) if p.as_os_str() == "-" => {
            println!("{}", serde_json::to_string_pretty(report).map_err(|e| e.to_string())?);
        }
        Some(p) => {
            report.print_table();
            let text = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
            std::fs::write(p, text + "\n").map_err(|e| format!("writing {}: {e}", p.display()))?;
        }
        None => report.print_table(),
    }
    Ok(())
}
