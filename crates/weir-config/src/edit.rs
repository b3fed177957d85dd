//! Edits to the config file that keep everything else in it as written (comments, order,
//! spacing): how the admin API's node operations change the file, which stays the one
//! source of truth.
//!
//! ```
//! use weir_config::edit::{NodeEdit, edit_node};
//! let text = "[pools.web]\n# the app servers\nnodes = [{ address = \"10.0.0.1:80\" }]\n";
//! let edited = edit_node(text, "web", "10.0.0.1:80".parse().unwrap(), NodeEdit::Weight(3)).unwrap();
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

/// Why an edit could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// The file is not valid TOML.
    #[error("the config file does not parse: {0}")]
    Syntax(String),
    /// The file has no pool of that name.
    #[error("no pool \"{0}\" in the config file")]
    NoPool(String),
    /// The pool has no node at that address.
    #[error("pool \"{pool}\" has no node {address}")]
    NoNode {
        /// The pool's name.
        pool: String,
        /// The address looked for.
        address: SocketAddr,
    },
}

/// `text` with the node at `address` of pool `pool` changed by `edit`. The node may be an
/// inline table in `nodes = [...]` or a `[[pools.NAME.nodes]]` table. Setting the state
/// back to active removes the `state` key (it is the default).
pub fn edit_node(
    text: &str,
    pool: &str,
    address: SocketAddr,
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
        address,
    };
    let is_node = |candidate: Option<&str>| {
        candidate.is_some_and(|text| text.trim().parse::<SocketAddr>().ok() == Some(address))
    };
    match nodes {
        Item::Value(Value::Array(array)) => {
            let table = array
                .iter_mut()
                .filter_map(|value| value.as_inline_table_mut())
                .find(|table| is_node(table.get("address").and_then(Value::as_str)))
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
                .find(|table| is_node(table.get("address").and_then(Item::as_str)))
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
        edit_node(text, "web", ADDRESS.parse().unwrap(), edit)
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
                address: ADDRESS.parse().unwrap()
            })
        );
        assert_eq!(
            edit_node(text, "api", ADDRESS.parse().unwrap(), NodeEdit::Weight(1)),
            Err(EditError::NoPool("api".into()))
        );
    }
}
