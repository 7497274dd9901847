//! Writes the HTML report of every real model and checks it: one rectangle per
//! arena buffer of the plan, and, when Chromium is installed, that the browser
//! parses the page into the same rectangles and takes a screenshot of it.
//!
//! Usage: `report_corpus [OUTDIR] [DIR...]`: reports and screenshots go to
//! OUTDIR (default `target/report-corpus`); each DIR holds model directories
//! (default: the real models in ../shared).

use onnx_codegen::generate::{Options, analyze};
use onnx_codegen_tests::browser;
use std::path::{Path, PathBuf};

fn main() {
    let mut args = std::env::args().skip(1);
    let out = PathBuf::from(args.next().unwrap_or_else(|| "target/report-corpus".into()));
    let mut roots: Vec<String> = args.collect();
    if roots.is_empty() {
        roots = vec![concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/models").into()];
    }
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("{}: {e}", out.display());
        std::process::exit(2);
    }
    let browser = browser::chromium();
    if browser.is_none() {
        eprintln!("*** chromium is not installed: the reports are NOT checked in a browser ***");
    }
    let (mut passed, mut failed) = (0usize, 0usize);
    for root in &roots {
        let dirs = onnx_codegen_tests::node_test_dirs(Path::new(root)).unwrap_or_else(|e| {
            eprintln!("{root}: {e}");
            std::process::exit(2);
        });
        for dir in dirs {
            let name =
                dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            match check(&dir, &name, &out, browser.as_deref()) {
                Ok(line) => {
                    passed += 1;
                    println!("PASS {name}: {line}");
                }
                Err(e) => {
                    failed += 1;
                    println!("FAIL {name}: {}", e.replace('\n', "\n    "));
                }
            }
        }
    }
    println!("report: {passed} passed, {failed} failed");
    if failed > 0 || passed == 0 {
        std::process::exit(1);
    }
}

fn check(dir: &Path, name: &str, out: &Path, chrome: Option<&Path>) -> Result<String, String> {
    let file = dir.join("model.onnx");
    let model = onnx_codegen::load::load_model(&file).map_err(|e| e.to_string())?;
    let analysis = analyze(&model, &Options::default()).map_err(|e| e.to_string())?;
    let html = onnx_codegen::report::html(&analysis, &file.display().to_string())
        .map_err(|e| e.to_string())?;
    let buffers = analysis.plan.as_ref().map_or(0, |p| p.buffers.len());
    let rects = html.matches("<rect class=\"buf\"").count();
    if rects != buffers {
        return Err(format!("{rects} rectangles for {buffers} arena buffers"));
    }
    let page = std::path::absolute(out.join(format!("{name}.html"))).map_err(|e| e.to_string())?;
    std::fs::write(&page, &html).map_err(|e| format!("{}: {e}", page.display()))?;
    let mut line = format!("{} bytes, {buffers} buffers", html.len());
    if let Some(exe) = chrome {
        let url = format!("file://{}", page.display());
        let profile = out.join(format!("{name}.profile"));
        let dom = browser::run(exe, &profile, &["--dump-dom".into(), url.clone()])?;
        let seen = dom.matches("<rect class=\"buf\"").count();
        if seen != buffers || !dom.contains("<h2>Nodes</h2>") {
            return Err(format!("the browser saw {seen} rectangles for {buffers} buffers"));
        }
        let shot = page.with_extension("png");
        browser::run(
            exe,
            &profile,
            &[
                format!("--screenshot={}", shot.display()),
                "--window-size=1280,1400".into(),
                "--hide-scrollbars".into(),
                url,
            ],
        )?;
        let png = std::fs::read(&shot).map_err(|e| format!("{}: {e}", shot.display()))?;
        if !png.starts_with(b"\x89PNG") || png.len() < 20_000 {
            return Err(format!("the screenshot {} looks empty", shot.display()));
        }
        let _ = std::fs::remove_dir_all(&profile);
        line += &format!(", rendered: {}", shot.display());
    }
    Ok(line)
}
