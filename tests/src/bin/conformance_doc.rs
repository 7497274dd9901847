//! Writes `docs/conformance.md`: for every operator in the ONNX backend
//! suites (node, and the older simple, pytorch-converted, pytorch-operator
//! and light model suites), how many tests use it, how many pass, and why
//! the others do not.
//!
//! Usage: `conformance_doc SUITE_DIR RESULTS_JSON [SUITE_DIR RESULTS_JSON]... OUT_MD`,
//! where each RESULTS_JSON is what `onnx-codegen test SUITE_DIR/* --json
//! RESULTS_JSON` wrote; a suite is named by its directory's last
//! component. A test counts for every operator its model uses (expanded
//! tests use several).

use onnx_codegen_proto::{Message, ModelProto};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::Path;

#[derive(Default)]
struct Row {
    tests: usize,
    passed: usize,
    /// Test name → reason, for the tests that did not pass.
    others: BTreeMap<String, String>,
}

fn ops_of(model: &Path) -> BTreeSet<String> {
    let Ok(bytes) = std::fs::read(model) else { return BTreeSet::new() };
    let Ok(m) = ModelProto::decode(bytes.as_slice()) else { return BTreeSet::new() };
    let graph = m.graph.unwrap_or_default();
    graph
        .node
        .iter()
        .map(|n| match n.domain() {
            "" | "ai.onnx" => n.op_type().to_owned(),
            d => format!("{d}.{}", n.op_type()),
        })
        .collect()
}

/// `tests/known_failures.txt`: test name → why it fails on purpose.
fn known_failures() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("known_failures.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// One suite's results: its directory and the outcomes `test --json` wrote.
struct Suite {
    name: String,
    dir: String,
    outcomes: Vec<serde_json::Value>,
}

/// One suite's counts, and the tests that did not pass with why.
struct Tally<'a> {
    suite: &'a str,
    tests: usize,
    passed: usize,
    /// (test, status and reason).
    failing: Vec<(String, String)>,
}

fn read_suite(dir: &str, results: &str) -> Suite {
    let text = std::fs::read_to_string(results).unwrap_or_else(|e| {
        eprintln!("{results}: {e}");
        std::process::exit(2);
    });
    let outcomes: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap_or_else(|e| {
        eprintln!("{results}: {e}");
        std::process::exit(2);
    });
    let name = Path::new(dir)
        .file_name()
        .map_or_else(|| dir.to_owned(), |n| n.to_string_lossy().into_owned());
    Suite { name, dir: dir.to_owned(), outcomes }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((out, pairs)) = args.split_last().filter(|(_, p)| !p.is_empty() && p.len() % 2 == 0)
    else {
        eprintln!(
            "usage: conformance_doc SUITE_DIR RESULTS_JSON [SUITE_DIR RESULTS_JSON]... OUT_MD"
        );
        std::process::exit(2);
    };
    let suites: Vec<Suite> = pairs.chunks(2).map(|p| read_suite(&p[0], &p[1])).collect();
    let known = known_failures();
    // Tests whose code needed a runtime feature or inputs fixed from the data.
    let mut with_features: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut fixed: Vec<(String, String)> = Vec::new();
    for o in suites.iter().flat_map(|s| &s.outcomes) {
        let name = o["name"].as_str().unwrap_or_default().to_owned();
        for f in o["features"].as_array().into_iter().flatten().filter_map(|f| f.as_str()) {
            with_features.entry(f.to_owned()).or_default().push(name.clone());
        }
        let inputs: Vec<&str> =
            o["fixed_inputs"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
        if !inputs.is_empty() {
            fixed.push((name, inputs.join(", ")));
        }
    }
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    let mut per_suite: Vec<Tally> = Vec::new();
    let (mut total, mut passed) = (0, 0);
    for suite in &suites {
        let mut failing = Vec::new();
        let (mut n, mut ok) = (0, 0);
        for o in &suite.outcomes {
            let name = o["name"].as_str().unwrap_or_default();
            let pass = o["status"] == "pass";
            n += 1;
            ok += usize::from(pass);
            let line = (!pass).then(|| {
                let status = o["status"].as_str().unwrap_or_default();
                let reason = o["reason"].as_str().unwrap_or_default();
                match known.get(name) {
                    Some(why) => format!("{status} (known: {why}): {reason}"),
                    None => format!("{status}: {reason}"),
                }
            });
            if let Some(line) = &line {
                failing.push((name.to_owned(), line.clone()));
            }
            for op in ops_of(&Path::new(&suite.dir).join(name).join("model.onnx")) {
                let row = rows.entry(op).or_default();
                row.tests += 1;
                match &line {
                    None => row.passed += 1,
                    Some(line) => {
                        row.others.insert(name.to_owned(), line.clone());
                    }
                }
            }
        }
        total += n;
        passed += ok;
        per_suite.push(Tally { suite: &suite.name, tests: n, passed: ok, failing });
    }
    let mut md = String::new();
    writeln!(md, "# Conformance: the ONNX backend test suites\n").unwrap();
    writeln!(
        md,
        "Written by `tests/src/bin/conformance_doc.rs` from `onnx-codegen test` results \
         (strict tolerance: rtol 1e-3, atol 1e-7). **{passed} of {total} tests pass.** \
         A test counts for every operator its model uses.\n\n\
         Generated code is allocation-free (`#![no_std]` kernels, no `alloc`) unless the \
         model has string tensors: those are generated with `--alloc` and need the \
         runtime's `alloc` feature; ImageDecoder needs `--image` and the runtime's `image` \
         feature (std). Every other test is generated in no-alloc mode. Tests that fail \
         on purpose are explained in `tests/known_failures.txt`.\n"
    )
    .unwrap();
    writeln!(md, "| suite | tests | pass | not passing |\n| --- | ---: | ---: | ---: |").unwrap();
    for t in &per_suite {
        writeln!(md, "| {} | {} | {} | {} |", t.suite, t.tests, t.passed, t.tests - t.passed)
            .unwrap();
    }
    writeln!(md, "| all | {total} | {passed} | {} |\n", total - passed).unwrap();
    for (feature, names) in &with_features {
        let list: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
        writeln!(md, "Generated with `{feature}` ({}): {}.\n", names.len(), list.join(", "))
            .unwrap();
    }
    if !fixed.is_empty() {
        let list: Vec<String> =
            fixed.iter().map(|(n, inputs)| format!("`{n}` ({inputs})")).collect();
        writeln!(
            md,
            "Generated with input values fixed from the test data (`--fix`: their output \
             shapes depend on those values; the code checks them at run time) ({}): {}.\n",
            fixed.len(),
            list.join(", ")
        )
        .unwrap();
    }
    writeln!(md, "| operator | tests | pass | not passing |\n| --- | ---: | ---: | ---: |")
        .unwrap();
    for (op, row) in &rows {
        writeln!(md, "| {op} | {} | {} | {} |", row.tests, row.passed, row.tests - row.passed)
            .unwrap();
    }
    writeln!(md, "\n## Tests that do not pass, by suite\n").unwrap();
    for t in per_suite.iter().filter(|t| !t.failing.is_empty()) {
        writeln!(md, "### {}\n", t.suite).unwrap();
        for (test, reason) in &t.failing {
            let reason: String = reason.chars().take(300).collect();
            writeln!(md, "- `{test}`: {}", reason.replace('|', "\\|")).unwrap();
        }
        md.push('\n');
    }
    writeln!(md, "## Why tests do not pass, by operator\n").unwrap();
    for (op, row) in rows.iter().filter(|(_, r)| !r.others.is_empty()) {
        writeln!(md, "### {op}\n").unwrap();
        for (test, reason) in &row.others {
            let reason: String = reason.chars().take(300).collect();
            writeln!(md, "- `{test}`: {}", reason.replace('|', "\\|")).unwrap();
        }
        md.push('\n');
    }
    if let Err(e) = std::fs::write(out, md) {
        eprintln!("{out}: {e}");
        std::process::exit(2);
    }
    println!("conformance: {passed} passed, {} failed", total - passed);
}
