//! The conformance ratchet: a test that passed must keep passing.
//!
//! Reads a runner's output (lines `PASS name`, `FAIL name: reason`,
//! `UNSUPPORTED name: reason`) from a file and compares it with a list of
//! names that passed before (one per line, `#` comments allowed).
//!
//! Usage: `ratchet LIST RUNNER_OUTPUT [--update]`
//!
//! Fails (exit 1) if any listed name did not pass, naming each. Prints how
//! many names pass now that the list does not hold; `--update` writes the
//! list anew as every name that passes now (refused while anything regresses).

use std::collections::BTreeSet;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let update = args.iter().any(|a| a == "--update");
    let paths: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let [list_path, output_path] = paths.as_slice() else {
        eprintln!("usage: ratchet LIST RUNNER_OUTPUT [--update]");
        return ExitCode::from(2);
    };
    let read = |p: &str| {
        std::fs::read_to_string(p).unwrap_or_else(|e| {
            if update && p == list_path.as_str() {
                return String::new();
            }
            eprintln!("ratchet: cannot read {p}: {e}");
            std::process::exit(2);
        })
    };
    let listed: BTreeSet<String> = read(list_path)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let mut passed = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for line in read(output_path).lines() {
        for (prefix, pass) in [("PASS ", true), ("FAIL ", false), ("UNSUPPORTED ", false)] {
            if let Some(rest) = line.strip_prefix(prefix) {
                let name = rest.split(": ").next().unwrap_or(rest).trim().to_owned();
                seen.insert(name.clone());
                if pass {
                    passed.insert(name);
                }
            }
        }
    }
    let regressed: Vec<&String> = listed.difference(&passed).collect();
    for name in &regressed {
        let why = if seen.contains(*name) { "now fails" } else { "did not run" };
        println!("REGRESSION {name}: passed before, {why}");
    }
    let new: Vec<&String> = passed.difference(&listed).collect();
    println!(
        "ratchet {list_path}: {} listed, {} regressed, {} newly passing{}",
        listed.len(),
        regressed.len(),
        new.len(),
        if new.is_empty() || update { "" } else { " (record them with --update)" }
    );
    if !regressed.is_empty() {
        return ExitCode::FAILURE;
    }
    if update {
        let mut text = String::from(
            "# Tests that pass and must keep passing (written by `ratchet --update`).\n",
        );
        for name in &passed {
            text.push_str(name);
            text.push('\n');
        }
        if let Err(e) = std::fs::write(list_path, text) {
            eprintln!("ratchet: cannot write {list_path}: {e}");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
