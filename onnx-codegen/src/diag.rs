//! Diagnostics: what went wrong, where, in words a user can act on.
//!
//! Every layer (loaders, validation, passes, emission) reports through
//! [`Diagnostic`]. A layer collects everything it finds before giving up, so a
//! user sees all the problems of a model at once; [`Error`] carries that list.
//!
//! A location is either a place in a text file (line, column, the line itself
//! for a caret) or a place in a graph (the path of nested graphs and the node,
//! value or attribute at fault).

use std::fmt;

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The model cannot be used.
    Error,
    /// The model can be used, but something was repaired or looks wrong.
    Warning,
}

/// A position in a source text. Lines and columns count from 1; columns count
/// characters, not bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourcePos {
    /// Line number, from 1.
    pub line: u32,
    /// Column number in characters, from 1.
    pub column: u32,
    /// The whole text of that line (without its newline), for the caret display.
    pub line_text: String,
    /// How many characters to underline (at least 1 is drawn).
    pub len: u32,
}

impl SourcePos {
    /// The position of byte offset `offset` in `src` (clamped to the text),
    /// underlining `len` characters.
    pub fn at(src: &str, offset: usize, len: u32) -> SourcePos {
        let mut offset = offset.min(src.len());
        while !src.is_char_boundary(offset) {
            offset -= 1;
        }
        let line_start = src[..offset].rfind('\n').map_or(0, |i| i + 1);
        let line_end = src[offset..].find('\n').map_or(src.len(), |i| offset + i);
        let line = src[..line_start].bytes().filter(|&b| b == b'\n').count() + 1;
        let column = src[line_start..offset].chars().count() + 1;
        SourcePos {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
            line_text: src[line_start..line_end].trim_end_matches('\r').to_owned(),
            len,
        }
    }
}

/// One step on the way from the model's main graph to the place at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathStep {
    /// A graph, by name.
    Graph(String),
    /// A node, by name (or `#index` when it has none) and operator type.
    Node { name: String, op_type: String },
    /// An attribute of the node before it (a subgraph or a tensor).
    Attribute(String),
    /// A model-local function, by domain and name.
    Function { domain: String, name: String },
    /// A value (graph input, output, initializer or node output), by name.
    Value(String),
    /// A tensor (initializer or constant), by name.
    Tensor(String),
}

impl fmt::Display for PathStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathStep::Graph(name) => write!(f, "graph '{name}'"),
            PathStep::Node { name, op_type } => write!(f, "node '{name}' ({op_type})"),
            PathStep::Attribute(name) => write!(f, "attribute '{name}'"),
            PathStep::Function { domain, name } if domain.is_empty() => {
                write!(f, "function '{name}'")
            }
            PathStep::Function { domain, name } => write!(f, "function '{domain}.{name}'"),
            PathStep::Value(name) => write!(f, "value '{name}'"),
            PathStep::Tensor(name) => write!(f, "tensor '{name}'"),
        }
    }
}

/// Where a diagnostic points.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Location {
    /// The file (model, external data file, test data), when known.
    pub file: Option<String>,
    /// A position in that file, for text models.
    pub pos: Option<SourcePos>,
    /// The path inside the model, outermost first.
    pub path: Vec<PathStep>,
}

impl Location {
    /// A location that names only a file.
    pub fn file(file: impl Into<String>) -> Location {
        Location { file: Some(file.into()), ..Location::default() }
    }

    /// A location inside a model, with no file yet (the caller adds it).
    pub fn path(path: Vec<PathStep>) -> Location {
        Location { path, ..Location::default() }
    }

    /// A position in a text file.
    pub fn source(file: impl Into<String>, pos: SourcePos) -> Location {
        Location { file: Some(file.into()), pos: Some(pos), path: Vec::new() }
    }
}

/// One problem found in a model or its inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    /// One sentence saying what is wrong; names the value, node or field at fault.
    pub message: String,
    pub location: Location,
    /// Further lines: what was expected, how to fix it.
    pub notes: Vec<String>,
}

impl Diagnostic {
    /// An error with no location yet.
    pub fn error(message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            location: Location::default(),
            notes: Vec::new(),
        }
    }

    /// A warning with no location yet.
    pub fn warning(message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(message) }
    }

    /// Sets the location.
    pub fn at(mut self, location: Location) -> Diagnostic {
        self.location = location;
        self
    }

    /// Sets the path inside the model.
    pub fn at_path(mut self, path: Vec<PathStep>) -> Diagnostic {
        self.location.path = path;
        self
    }

    /// Sets the file, unless one is set already.
    pub fn in_file(mut self, file: &str) -> Diagnostic {
        if self.location.file.is_none() {
            self.location.file = Some(file.to_owned());
        }
        self
    }

    /// Adds a note line.
    pub fn note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }
}

impl fmt::Display for Diagnostic {
    /// Renders as a compiler would:
    ///
    /// ```text
    /// error: expected ']' or ',', found '='
    ///   --> net.onnxtxt:3:14
    ///    |
    ///  3 |   float[N, 3 = X
    ///    |              ^
    /// ```
    ///
    /// followed, for errors found in the graph, by the path to the place at
    /// fault (`= in graph 'main' > node 'conv1' (Conv)`) and by the notes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{label}: {}", self.message)?;
        let loc = &self.location;
        match (&loc.file, &loc.pos) {
            (Some(file), Some(pos)) => write!(f, "\n  --> {file}:{}:{}", pos.line, pos.column)?,
            (Some(file), None) => write!(f, "\n  --> {file}")?,
            (None, Some(pos)) => write!(f, "\n  --> {}:{}", pos.line, pos.column)?,
            (None, None) => {}
        }
        if let Some(pos) = &loc.pos {
            let number = pos.line.to_string();
            let pad = " ".repeat(number.len());
            // Tabs would misplace the caret: show them as one space each.
            let text: String =
                pos.line_text.chars().map(|c| if c == '\t' { ' ' } else { c }).collect();
            let shown: String = text.chars().take(200).collect();
            let col = usize::try_from(pos.column).unwrap_or(usize::MAX).saturating_sub(1);
            write!(f, "\n {pad} |\n {number} | {shown}")?;
            if col <= shown.chars().count() {
                let carets = "^".repeat(usize::try_from(pos.len.max(1)).unwrap_or(1).min(80));
                write!(f, "\n {pad} | {}{carets}", " ".repeat(col))?;
            }
        }
        if !loc.path.is_empty() {
            let path: Vec<String> = loc.path.iter().map(ToString::to_string).collect();
            write!(f, "\n   = in {}", path.join(" > "))?;
        }
        for note in &self.notes {
            write!(f, "\n   = {note}")?;
        }
        Ok(())
    }
}

/// The error type of the library: one or more diagnostics, at least one of
/// them an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    diagnostics: Vec<Diagnostic>,
}

impl Error {
    /// An error made of these diagnostics. An empty list becomes one generic error,
    /// so an `Error` never says nothing.
    pub fn new(mut diagnostics: Vec<Diagnostic>) -> Error {
        if !diagnostics.iter().any(|d| d.severity == Severity::Error) {
            diagnostics.push(Diagnostic::error("the model was refused"));
        }
        Error { diagnostics }
    }

    /// All diagnostics, in the order they were found.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// Consumes the error, giving its diagnostics.
    pub fn into_diagnostics(self) -> Vec<Diagnostic> {
        self.diagnostics
    }

    /// Sets the file on every diagnostic that has none.
    pub fn in_file(self, file: &str) -> Error {
        Error { diagnostics: self.diagnostics.into_iter().map(|d| d.in_file(file)).collect() }
    }
}

impl From<Diagnostic> for Error {
    fn from(d: Diagnostic) -> Error {
        Error::new(vec![d])
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                f.write_str("\n\n")?;
            }
            write!(f, "{d}")?;
        }
        let errors = self.diagnostics.iter().filter(|d| d.severity == Severity::Error).count();
        if errors > 1 {
            write!(f, "\n\n{errors} errors")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A collector for passes that report many problems before giving up.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics {
    list: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn new() -> Diagnostics {
        Diagnostics::default()
    }

    pub fn push(&mut self, d: Diagnostic) {
        self.list.push(d);
    }

    /// Whether any error (not warning) was pushed.
    pub fn has_errors(&self) -> bool {
        self.list.iter().any(|d| d.severity == Severity::Error)
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.list.iter()
    }

    /// `Err` with everything collected if any error was pushed, else `Ok(value)`
    /// and the warnings.
    pub fn finish<T>(self, value: T) -> Result<(T, Vec<Diagnostic>)> {
        if self.has_errors() { Err(Error::new(self.list)) } else { Ok((value, self.list)) }
    }

    /// Everything collected, errors and warnings.
    pub fn into_vec(self) -> Vec<Diagnostic> {
        self.list
    }
}

impl Extend<Diagnostic> for Diagnostics {
    fn extend<I: IntoIterator<Item = Diagnostic>>(&mut self, iter: I) {
        self.list.extend(iter);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_positions_count_lines_and_characters() {
        let src = "a\nbé c\n";
        let pos = SourcePos::at(src, src.find('c').unwrap(), 1);
        assert_eq!((pos.line, pos.column), (2, 4));
        assert_eq!(pos.line_text, "bé c");
        let end = SourcePos::at(src, src.len() + 10, 1);
        assert_eq!((end.line, end.column), (3, 1));
    }

    #[test]
    fn renders_file_line_column_and_caret() {
        let src = "x = Add(a,\n   b c)";
        let d = Diagnostic::error("expected ',' or ')', found identifier 'c'")
            .at(Location::source("m.onnxtxt", SourcePos::at(src, src.rfind('c').unwrap(), 1)));
        assert_eq!(
            d.to_string(),
            "error: expected ',' or ')', found identifier 'c'\n  --> m.onnxtxt:2:6\n   |\n 2 |    b c)\n   |      ^"
        );
    }

    #[test]
    fn renders_graph_paths() {
        let d = Diagnostic::error("input 'x' is not defined").in_file("net.onnx").at_path(vec![
            PathStep::Graph("main".into()),
            PathStep::Node { name: "if0".into(), op_type: "If".into() },
            PathStep::Attribute("then_branch".into()),
        ]);
        assert_eq!(
            d.to_string(),
            "error: input 'x' is not defined\n  --> net.onnx\n   = in graph 'main' > node 'if0' (If) > attribute 'then_branch'"
        );
    }

    #[test]
    fn source_line_comes_before_the_graph_path_and_notes() {
        let src = "g (float[2] x) => (float[2] y) {\n  [mul] y = Mul (x, w)\n}";
        let pos = SourcePos::at(src, src.find("Mul").unwrap(), 3);
        let d = Diagnostic::error("input 'w' of node 'mul' is not defined")
            .at(Location::source("m.onnxtxt", pos))
            .at_path(vec![
                PathStep::Graph("g".into()),
                PathStep::Node { name: "mul".into(), op_type: "Mul".into() },
            ])
            .note("define 'w' before the node");
        assert_eq!(
            d.to_string(),
            "error: input 'w' of node 'mul' is not defined\n  --> m.onnxtxt:2:13\n   |\n 2 |   [mul] y = Mul (x, w)\n   |             ^^^\n   = in graph 'g' > node 'mul' (Mul)\n   = define 'w' before the node"
        );
    }

    #[test]
    fn error_counts_only_errors() {
        let e = Error::new(vec![
            Diagnostic::error("a"),
            Diagnostic::warning("b"),
            Diagnostic::error("c"),
        ]);
        assert!(e.to_string().ends_with("2 errors"));
        assert_eq!(Error::new(vec![Diagnostic::warning("w")]).diagnostics().len(), 2);
    }
}
