//! `lanes status` and `lanes cleanup`.

use lanes::config::FabricConfig;

fn fabric_dir() -> Result<std::path::PathBuf, String> {
    Ok(FabricConfig::from_env().map_err(|e| e.to_string())?.dir)
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn status(json: bool) -> Result<(), String> {
    let dir = fabric_dir()?;
    let st = lanes::status(&dir).map_err(|e| e.to_string())?;
    if json {
        println!("{}", serde_json::to_string_pretty(&st).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!("fabric {}", st.dir.display());
    println!("\nnodes");
    if st.nodes.is_empty() {
        println!("  (none)");
    }
    for n in &st.nodes {
        let pids: Vec<String> = n.pids.iter().map(|p| p.to_string()).collect();
        let stale = if n.stale_records > 0 { format!("  ({} stale records)", n.stale_records) } else { String::new() };
        println!("  node {:>5}  pids {}{stale}", n.node, if pids.is_empty() { "-".into() } else { pids.join(",") });
    }
    println!("\nsegments and interrupts");
    if st.segments.is_empty() {
        println!("  (none)");
        return Ok(());
    }
    println!(
        "  {:<14}  {:>5}  {:>10}  {:>10}  {:>8}  {:>5}  {:<24}  connections",
        "kind", "node", "id", "size", "owner", "alive", "state"
    );
    for s in &st.segments {
        let conns: Vec<String> = s.connections.iter().map(|(n, p)| format!("{n}:{p}")).collect();
        let state = match &s.corrupt {
            Some(r) => format!("corrupt: {r}"),
            None => s.state.clone(),
        };
        println!(
            "  {:<14}  {:>5}  {:>#10x}  {:>10}  {:>8}  {:>5}  {:<24}  {}",
            s.kind,
            s.node,
            s.id,
            human_bytes(s.size),
            s.owner_pid,
            if s.alive { "yes" } else { "no" },
            state,
            if conns.is_empty() { "-".into() } else { conns.join(",") }
        );
    }
    Ok(())
}

pub fn cleanup(json: bool) -> Result<(), String> {
    let dir = fabric_dir()?;
    let r = lanes::cleanup(&dir).map_err(|e| e.to_string())?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?);
        return Ok(());
    }
    for (node, id, why) in &r.segments {
        println!("removed segment {id:#x} of node {node}: {why}");
    }
    for (node, pid) in &r.records {
        println!("removed stale record of pid {pid} (node {node})");
    }
    if r.segments.is_empty() && r.records.is_empty() {
        println!("nothing to clean in {}", dir.display());
    }
    Ok(())
}
