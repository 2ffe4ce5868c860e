//! The examples' README runs its programs across hosts with the node ids of the example
//! cluster configuration in the top-level README (`[[node]]` entries): a reader who copies
//! both gets a working pair.

use std::collections::BTreeSet;
use std::path::Path;

fn read(rel: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The numbers following `key` in `text` (`LANES_NODE_ID=12` gives 12 for key `LANES_NODE_ID=`).
fn numbers_after(text: &str, key: &str) -> Vec<u32> {
    text.match_indices(key)
        .filter_map(|(i, _)| {
            let digits: String = text[i + key.len()..].chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

#[test]
fn examples_across_hosts_use_the_example_configurations_nodes() {
    let readme = read("README.md");
    let listed: BTreeSet<u32> = readme
        .split("[[node]]")
        .skip(1)
        .filter_map(|entry| numbers_after(entry.lines().find(|l| l.starts_with("id = "))?, "id = ").first().copied())
        .collect();
    assert!(!listed.is_empty(), "the top-level README has no example [[node]] entries");
    let examples = read("examples/c/README.md");
    let start = examples.find("Across hosts").expect("the examples README says how to run across hosts");
    let end = examples[start..].find("\n\n").map_or(examples.len(), |e| start + e);
    let across = &examples[start..end];
    let used: Vec<u32> = [numbers_after(across, "LANES_NODE_ID="), numbers_after(across, "-rn ")].concat();
    assert!(!used.is_empty(), "no node ids in:\n{across}");
    for n in used {
        assert!(
            listed.contains(&n),
            "node {n} of the examples README is not in the example lanes.toml {listed:?}:\n{across}"
        );
    }
}
