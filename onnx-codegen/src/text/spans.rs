//! Where the parts of a text model are: the parser records the byte offset
//! of every graph, node, attribute and named value, so that an error found
//! later in the graph (by validation or inference, which see only protobuf
//! messages) can point at a line of the file.

use crate::diag::{PathStep, SourcePos};

/// The positions of the main graph's parts (functions are not recorded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceMap {
    pub main: Option<GraphSpan>,
}

/// A graph: where its name is, its nodes, and its named values (inputs,
/// outputs, initializers, value infos) in the order written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphSpan {
    pub name: String,
    pub offset: usize,
    /// The byte length of the name as written.
    pub name_len: usize,
    pub nodes: Vec<NodeSpan>,
    /// (name, byte offset, byte length of the name as written).
    pub values: Vec<(String, usize, usize)>,
}

/// A node: where it starts, its name (empty if none), where its operator
/// name is (the caret goes there), and its attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSpan {
    pub name: String,
    pub offset: usize,
    pub op_offset: usize,
    pub op_len: usize,
    pub attributes: Vec<AttrSpan>,
}

/// An attribute and the graphs it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttrSpan {
    pub name: String,
    pub offset: usize,
    pub graphs: Vec<GraphSpan>,
}

impl SourceMap {
    /// The position in `src` of the innermost part of `path` that can be
    /// found: the node, attribute, value or graph the path ends at, or the
    /// closest enclosing one. `None` if not even the first step matches.
    pub fn locate(&self, src: &str, path: &[PathStep]) -> Option<SourcePos> {
        let (offset, len) = self.find(path)?;
        let len = u32::try_from(len.max(1)).unwrap_or(u32::MAX);
        Some(SourcePos::at(src, offset, len))
    }

    fn find(&self, path: &[PathStep]) -> Option<(usize, usize)> {
        let mut graph = self.main.as_ref()?;
        let mut node: Option<&NodeSpan> = None;
        let mut attr: Option<&AttrSpan> = None;
        let mut found = None;
        for (i, step) in path.iter().enumerate() {
            match step {
                PathStep::Graph(name) => {
                    if let Some(a) = attr {
                        graph = a.graphs.iter().find(|g| &g.name == name)?;
                    } else if i > 0 || &graph.name != name {
                        return found;
                    }
                    node = None;
                    attr = None;
                    found = Some((graph.offset, graph.name_len));
                }
                PathStep::Node { name, .. } => {
                    let n = graph.nodes.iter().find(|n| !n.name.is_empty() && &n.name == name);
                    let n = n.or_else(|| {
                        let k: usize = name.strip_prefix('#')?.parse().ok()?;
                        graph.nodes.get(k)
                    });
                    let Some(n) = n else { return found };
                    node = Some(n);
                    attr = None;
                    found = Some((n.op_offset, n.op_len));
                }
                PathStep::Attribute(name) => {
                    let Some(a) = node.and_then(|n| n.attributes.iter().find(|a| &a.name == name))
                    else {
                        return found;
                    };
                    attr = Some(a);
                    found = Some((a.offset, a.name.chars().count()));
                }
                PathStep::Value(name) | PathStep::Tensor(name) => {
                    let Some(&(_, offset, len)) = graph.values.iter().find(|(n, ..)| n == name)
                    else {
                        return found;
                    };
                    found = Some((offset, len));
                }
                PathStep::Function { .. } => return found,
            }
        }
        found
    }
}

/// Gives every diagnostic that has a graph path but no source position the
/// position of the innermost part of its path found in `map`.
pub fn attach_positions(src: &str, map: &SourceMap, diagnostics: &mut [crate::diag::Diagnostic]) {
    for d in diagnostics {
        if d.location.pos.is_none()
            && !d.location.path.is_empty()
            && let Some(pos) = map.locate(src, &d.location.path)
        {
            d.location.pos = Some(pos);
        }
    }
}
