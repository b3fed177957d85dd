//! Edits to the config file that keep everything else in it as written (comments, order,
//! spacing): how the admin API's node operations change the file, which stays the one
//! source of truth.
//!
//! ```
//! use weir_config::edit::{NodeEdit, NodeRef, edit_node};
//! let text = "[pools.web]\n# the app servers\nnodes = [{ address = \"10.0.0.1:80\" }]\n";
//! let node = NodeRef::Address("10.0.0.1:80".parse().unwrap());
//! let edited = edit_node(text, "web", node, NodeEdit::Weight(3)).unwrap();
//! assert_eq!(
//!     edited,
//!     "[pools.web]\n# the app servers\nnodes = [{ address = \"10.0.0.1:80\", weight = 3 }]\n"
//! );
//! ```

use std::net::SocketAddr;

use toml_edit::{DocumentMut, Item, Value};

use crate::model::NodeMode;

/// One change to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeEdit {
    /// Set the node's weight.
    Weight(u32),
    /// Set the node's state (active, draining, disabled).
    State(NodeMode),
}

/// Which entry of a pool's `nodes` an edit is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRef<'a> {
    /// The entry whose `address` is this IP address and port.
    Address(SocketAddr),
    /// The entry of a node given by DNS name, by its label ([`crate::NamedNode::label`]):
    /// `host:port` for an `address` (the host compared as validation reads it: without
    /// case, without a trailing dot), `srv:NAME` for an `srv` entry. Its `weight` and
    /// `state` apply to every address the name resolves to.
    Name(&'a str),
}

impl std::fmt::Display for NodeRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeRef::Address(address) => write!(f, "{address}"),
            NodeRef::Name(name) => write!(f, "{name}"),
        }
    }
}

impl NodeRef<'_> {
    /// Whether the entry with this `address` and `srv` value is the one meant.
    fn is(&self, address: Option<&str>, srv: Option<&str>) -> bool {
        match *self {
            NodeRef::Address(wanted) => {
                address.is_some_and(|text| text.trim().parse::<SocketAddr>().ok() == Some(wanted))
            }
            NodeRef::Name(label) => match srv {
                Some(service) => same_label(&format!("srv:{}", service.trim()), label),
                None => address.is_some_and(|written| same_label(written.trim(), label)),
            },
        }
    }
}

/// Whether two labels of nodes given by DNS name ([`crate::NamedNode::label`]: `host:port`,
/// `srv:NAME`) name one entry as validation reads them: the host or service without regard
/// to case or a trailing dot, the port exact.
pub fn same_label(a: &str, b: &str) -> bool {
    let bare = |name: &str| name.trim_end_matches('.').to_ascii_lowercase();
    match (a.strip_prefix("srv:"), b.strip_prefix("srv:")) {
        (Some(a), Some(b)) => bare(a) == bare(b),
        (None, None) => match (a.rsplit_once(':'), b.rsplit_once(':')) {
            (Some((a, port)), Some((b, other))) => port == other && bare(a) == bare(b),
            _ => false,
        },
        _ => false,
    }
}

/// Why an edit could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// The file is not valid TOML.
    #[error("the config file does not parse: {0}")]
    Syntax(String),
    /// The file has no pool of that name.
    #[error("no pool \"{0}\" in the config file")]
    NoPool(String),
    /// The pool has no such node.
    #[error("pool \"{pool}\" has no node {node}")]
    NoNode {
        /// The pool's name.
        pool: String,
        /// The node looked for: its address, or the label of its name.
        node: String,
    },
}

/// `text` with the node `node` of pool `pool` changed by `edit`. The node may be an
/// inline table in `nodes = [...]` or a `[[pools.NAME.nodes]]` table. Setting the state
/// back to active removes the `state` key (it is the default).
pub fn edit_node(
    text: &str,
    pool: &str,
    node: NodeRef<'_>,
    edit: NodeEdit,
) -> Result<String, EditError> {
    // A panic in the parser (see `parse_document` in lib.rs) is a syntax error too.
    let parsed = std::panic::catch_unwind(|| text.parse::<DocumentMut>());
    let mut document = match parsed {
        Ok(parsed) => parsed.map_err(|error| EditError::Syntax(error.message().to_owned()))?,
        Err(_) => {
            return Err(EditError::Syntax(
                "the TOML parser failed on this file".into(),
            ));
        }
    };
    let nodes = document
        .as_table_mut()
        .get_mut("pools")
        .and_then(Item::as_table_like_mut)
        .and_then(|pools| pools.get_mut(pool))
        .and_then(Item::as_table_like_mut)
        .and_then(|pool| pool.get_mut("nodes"))
        .ok_or_else(|| EditError::NoPool(pool.to_owned()))?;
    let no_node = || EditError::NoNode {
        pool: pool.to_owned(),
        node: node.to_string(),
    };
    match nodes {
        Item::Value(Value::Array(array)) => {
            let table = array
                .iter_mut()
                .filter_map(|value| value.as_inline_table_mut())
                .find(|table| {
                    node.is(
                        table.get("address").and_then(Value::as_str),
                        table.get("srv").and_then(Value::as_str),
                    )
                })
                .ok_or_else(no_node)?;
            match edit {
                NodeEdit::Weight(weight) => {
                    table.insert("weight", Value::from(i64::from(weight)));
                }
                NodeEdit::State(NodeMode::Active) => {
                    table.remove("state");
                }
                NodeEdit::State(state) => {
                    table.insert("state", Value::from(state.as_str()));
                }
            }
            // The entry that was last may carry the space before `}`: one format for all.
            table.fmt();
        }
        Item::ArrayOfTables(tables) => {
            let table = tables
                .iter_mut()
                .find(|table| {
                    node.is(
                        table.get("address").and_then(Item::as_str),
                        table.get("srv").and_then(Item::as_str),
                    )
                })
                .ok_or_else(no_node)?;
            match edit {
                NodeEdit::Weight(weight) => {
                    table.insert("weight", toml_edit::value(i64::from(weight)));
                }
                NodeEdit::State(NodeMode::Active) => {
                    table.remove("state");
                }
                NodeEdit::State(state) => {
                    table.insert("state", toml_edit::value(state.as_str()));
                }
            }
        }
        _ => return Err(no_node()),
    }
    Ok(document.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADDRESS: &str = "10.0.0.2:80";

    fn edit(text: &str, edit: NodeEdit) -> Result<String, EditError> {
        edit_node(
            text,
            "web",
            NodeRef::Address(ADDRESS.parse().unwrap()),
            edit,
        )
    }

    #[test]
    fn inline_nodes_keep_their_layout() {
        let text = "[pools.web]\nnodes = [\n  { address = \"10.0.0.1:80\" },\n  { address = \"10.0.0.2:80\", weight = 2 }, # b\n]\n";
        let drained = edit(text, NodeEdit::State(NodeMode::Draining)).unwrap();
        assert_eq!(
            drained,
            "[pools.web]\nnodes = [\n  { address = \"10.0.0.1:80\" },\n  { address = \"10.0.0.2:80\", weight = 2, state = \"draining\" }, # b\n]\n"
        );
        let enabled = edit(&drained, NodeEdit::State(NodeMode::Active)).unwrap();
        assert_eq!(enabled, text);
        let config = crate::parse_str(
            &format!(
                "{}[virtual_servers.w]\nlisten = \"127.0.0.1:1\"\npool = \"web\"\n",
                drained
            ),
            "t.toml",
        )
        .unwrap();
        assert_eq!(config.pools[0].nodes[1].state, NodeMode::Draining);
    }

    #[test]
    fn arrays_of_tables_too() {
        let text = "[[pools.web.nodes]]\naddress = \"10.0.0.2:80\"\n";
        assert_eq!(
            edit(text, NodeEdit::Weight(7)).unwrap(),
            "[[pools.web.nodes]]\naddress = \"10.0.0.2:80\"\nweight = 7\n"
        );
    }

    #[test]
    fn unknown_pools_and_nodes() {
        let text = "[pools.web]\nnodes = [{ address = \"10.0.0.1:80\" }]\n";
        assert_eq!(
            edit(text, NodeEdit::Weight(1)),
            Err(EditError::NoNode {
                pool: "web".into(),
                node: ADDRESS.into()
            })
        );
        let node = NodeRef::Address(ADDRESS.parse().unwrap());
        assert_eq!(
            edit_node(text, "api", node, NodeEdit::Weight(1)),
            Err(EditError::NoPool("api".into()))
        );
    }

    /// A node given by DNS name is edited by its label, as the API lists it: the host
    /// without case or trailing dot, the port exact; a service by `srv:NAME`. An address
    /// that one of them resolves to names no entry of the file.
    #[test]
    fn names_are_edited_by_their_label() {
        let text = "[pools.web]\nnodes = [\n  { address = \"App.Internal.:8080\" },\n  \
                    { srv = \"_http._tcp.api.internal\" },\n  { address = \"10.0.0.1:80\" },\n]\n";
        let drain = NodeEdit::State(NodeMode::Draining);
        let edited = edit_node(text, "web", NodeRef::Name("app.internal:8080"), drain).unwrap();
        assert!(
            edited.contains("{ address = \"App.Internal.:8080\", state = \"draining\" },"),
            "{edited}"
        );
        let service = NodeRef::Name("srv:_http._tcp.api.internal");
        let edited = edit_node(text, "web", service, NodeEdit::Weight(4)).unwrap();
        assert!(
            edited.contains("{ srv = \"_http._tcp.api.internal\", weight = 4 },"),
            "{edited}"
        );
        for other in [
            "app.internal:8081",
            "other.internal:8080",
            "srv:_http._tcp.app",
        ] {
            assert_eq!(
                edit_node(text, "web", NodeRef::Name(other), drain),
                Err(EditError::NoNode {
                    pool: "web".into(),
                    node: other.into()
                })
            );
        }
        let resolved = NodeRef::Address("10.0.0.9:8080".parse().unwrap());
        assert!(edit_node(text, "web", resolved, drain).is_err());
    }
}
