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

use toml_edit::{Decor, DocumentMut, InlineTable, Item, Key, Table, Value};

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
/// inline table in `nodes = [...]` or a `[[pools.NAME.nodes]]` table. A key the node has
/// is changed in place (its spacing and comments kept); one it lacks is added after its
/// last key. Setting the state back to active removes the `state` key (it is the
/// default), unless a comment is written on it: then it says `"active"`, and the comment
/// stays. A drain and an enable give back the file as it was.
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
                    set_inline(table, "weight", Value::from(i64::from(weight)));
                }
                NodeEdit::State(NodeMode::Active) => remove_inline(table, "state"),
                NodeEdit::State(state) => set_inline(table, "state", Value::from(state.as_str())),
            }
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
                    set_in_table(table, "weight", Value::from(i64::from(weight)));
                }
                NodeEdit::State(NodeMode::Active) => remove_from_table(table, "state"),
                NodeEdit::State(state) => {
                    set_in_table(table, "state", Value::from(state.as_str()));
                }
            }
        }
        _ => return Err(no_node()),
    }
    Ok(document.to_string())
}

/// `new` in the place of `slot`, with `slot`'s spacing and trailing comment.
fn replace_keeping_decor(slot: &mut Value, new: Value) {
    let decor = slot.decor().clone();
    *slot = new;
    *slot.decor_mut() = decor;
}

/// Whether a comment is written on a key or its value (the lines above it, or after it).
fn commented(key: &Key, value: &Item) -> bool {
    let has = |decor: &Decor| {
        [decor.prefix(), decor.suffix()]
            .into_iter()
            .flatten()
            .any(|raw| raw.as_str().is_some_and(|text| text.contains('#')))
    };
    has(key.leaf_decor()) || value.as_value().is_some_and(|value| has(value.decor()))
}

/// Sets `key` of a `[[pools.NAME.nodes]]` table: in place when it is there, else as a new
/// line after the table's last key.
fn set_in_table(table: &mut Table, key: &str, value: Value) {
    match table.get_mut(key) {
        Some(Item::Value(slot)) => replace_keeping_decor(slot, value),
        _ => {
            table.insert(key, Item::Value(value));
        }
    }
}

/// Removes `key` from a `[[pools.NAME.nodes]]` table, or makes it `"active"` when a comment
/// is written on it ([`edit_node`]).
fn remove_from_table(table: &mut Table, key: &str) {
    match table.get_key_value(key) {
        Some((written, value)) if commented(written, value) => {
            set_in_table(table, key, Value::from(NodeMode::Active.as_str()));
        }
        Some(_) => {
            table.remove(key);
        }
        None => {}
    }
}

/// The last key of an inline table: the one whose value carries the space before `}`.
fn last_key(table: &InlineTable) -> Option<String> {
    table.iter().last().map(|(key, _)| key.to_owned())
}

/// Sets `key` of an inline node table: in place when it is there, else after the last
/// key, taking over the space that key's value had before `}`; the rest of the entry
/// stays as written.
fn set_inline(table: &mut InlineTable, key: &str, mut value: Value) {
    if let Some(slot) = table.get_mut(key) {
        replace_keeping_decor(slot, value);
        return;
    }
    let last = last_key(table);
    if let Some(previous) = last.as_deref().and_then(|last| table.get_mut(last))
        && let Some(trailing) = previous.decor().suffix().cloned()
    {
        previous.decor_mut().set_suffix("");
        value.decor_mut().set_prefix(" ");
        value.decor_mut().set_suffix(trailing);
    }
    table.insert(key, value);
}

/// Removes `key` from an inline node table, handing the space before `}` to the key that
/// is last after it; or makes it `"active"` when a comment is written on it.
fn remove_inline(table: &mut InlineTable, key: &str) {
    let commented = table
        .get_key_value(key)
        .is_some_and(|(written, value)| commented(written, value));
    if commented {
        set_inline(table, key, Value::from(NodeMode::Active.as_str()));
        return;
    }
    let was_last = last_key(table).as_deref() == Some(key);
    let Some(removed) = table.remove(key) else {
        return;
    };
    if was_last
        && let Some(trailing) = removed.decor().suffix().cloned()
        && let Some(last) = last_key(table)
        && let Some(value) = table.get_mut(&last)
    {
        value.decor_mut().set_suffix(trailing);
    }
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

    /// Spacing as written, other than the usual, comes back unchanged from a drain and an
    /// enable, and a weight changes in place.
    #[test]
    fn inline_nodes_keep_spacing_as_written() {
        for (text, drained) in [
            (
                "[pools.web]\nnodes = [{ address = \"10.0.0.2:80\",    weight = 1 }]\n",
                "[pools.web]\nnodes = [{ address = \"10.0.0.2:80\",    weight = 1, state = \"draining\" }]\n",
            ),
            (
                "[pools.web]\nnodes = [{address=\"10.0.0.2:80\"}]\n",
                "[pools.web]\nnodes = [{address=\"10.0.0.2:80\", state = \"draining\"}]\n",
            ),
            (
                "[pools.web]\nnodes = [{   \"address\"   =   \"10.0.0.2:80\"   ,   weight   =   2   }]\n",
                "[pools.web]\nnodes = [{   \"address\"   =   \"10.0.0.2:80\"   ,   weight   =   2, state = \"draining\"   }]\n",
            ),
        ] {
            let edited = edit(text, NodeEdit::State(NodeMode::Draining)).unwrap();
            assert_eq!(edited, drained);
            assert_eq!(
                edit(&edited, NodeEdit::State(NodeMode::Active)).unwrap(),
                text
            );
        }
        assert_eq!(
            edit(
                "[pools.web]\nnodes = [{ address = \"10.0.0.2:80\",    weight = 1 }]\n",
                NodeEdit::Weight(30)
            )
            .unwrap(),
            "[pools.web]\nnodes = [{ address = \"10.0.0.2:80\",    weight = 30 }]\n"
        );
    }

    /// Comments written on the keys an operation changes stay; a commented state made
    /// active says so rather than lose its comment.
    #[test]
    fn tables_keep_the_comments_on_the_keys_they_change() {
        let text = "[[pools.web.nodes]]\naddress = \"10.0.0.2:80\"\n\
                    weight = 1            # canary: keep at 1 until OPS-42 closes\n\
                    # owner: team-b\n\
                    state = \"active\"      # set by the on-call\n\
                    \n[[pools.web.nodes]]\naddress = \"10.0.0.3:80\"\n";
        let weighted = edit(text, NodeEdit::Weight(2)).unwrap();
        assert_eq!(weighted, text.replace("weight = 1 ", "weight = 2 "));
        let drained = edit(&weighted, NodeEdit::State(NodeMode::Draining)).unwrap();
        assert_eq!(
            drained,
            weighted.replace("state = \"active\"", "state = \"draining\"")
        );
        assert_eq!(
            edit(&drained, NodeEdit::State(NodeMode::Active)).unwrap(),
            weighted
        );
        // Without a comment, the default state is not written.
        let plain = "[[pools.web.nodes]]\naddress = \"10.0.0.2:80\"\nweight = 3\n";
        let drained = edit(plain, NodeEdit::State(NodeMode::Draining)).unwrap();
        assert_eq!(drained, format!("{plain}state = \"draining\"\n"));
        assert_eq!(
            edit(&drained, NodeEdit::State(NodeMode::Active)).unwrap(),
            plain
        );
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
