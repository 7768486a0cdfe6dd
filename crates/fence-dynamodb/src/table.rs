//! The table a store writes to, as `DescribeTable` tells it, judged before the first request:
//! fence's key schema, and no replica that conditional writes would not fence.
//!
//! A global table replicates every write to its other Regions. In its default mode,
//! multi-Region eventual consistency, each Region evaluates conditions against its own copy and
//! the last writer wins across Regions: two processes in two Regions can both win one
//! compare-and-swap. Only multi-Region strong consistency (`MultiRegionConsistency: STRONG`)
//! evaluates a condition against every Region's latest write.

use serde::Deserialize;

/// The answer to `DescribeTable`, as far as fence reads it.
#[derive(Debug, Deserialize)]
pub(crate) struct Described {
    #[serde(rename = "Table")]
    pub table: TableDescription,
}

/// A table's description.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct TableDescription {
    #[serde(rename = "KeySchema", default)]
    key_schema: Vec<KeyElement>,
    #[serde(rename = "AttributeDefinitions", default)]
    attributes: Vec<AttributeDefinition>,
    #[serde(rename = "Replicas", default)]
    replicas: Vec<Replica>,
    #[serde(rename = "MultiRegionConsistency")]
    consistency: Option<String>,
    #[serde(rename = "GlobalTableVersion")]
    global_version: Option<String>,
    #[serde(rename = "TableStatus")]
    status: Option<String>,
}

#[derive(Debug, Deserialize)]
struct KeyElement {
    #[serde(rename = "AttributeName")]
    name: String,
    #[serde(rename = "KeyType")]
    kind: String,
}

#[derive(Debug, Deserialize)]
struct AttributeDefinition {
    #[serde(rename = "AttributeName")]
    name: String,
    #[serde(rename = "AttributeType")]
    kind: String,
}

#[derive(Debug, Deserialize)]
struct Replica {
    #[serde(rename = "RegionName")]
    region: Option<String>,
}

/// Why a table cannot hold a fence store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unfit {
    /// Its key schema is not fence's (`pk` S HASH, `sk` S RANGE).
    KeySchema(String),
    /// It has replicas in other Regions and is not in multi-Region strong consistency.
    EventualReplicas(String),
}

impl TableDescription {
    /// Whether the table serves requests (`TableStatus: ACTIVE`).
    pub fn is_active(&self) -> bool {
        self.status.as_deref() == Some("ACTIVE")
    }

    /// Whether fence may write to this table.
    pub fn judge(&self) -> Result<(), Unfit> {
        self.check_keys()?;
        self.check_replicas()
    }

    fn check_keys(&self) -> Result<(), Unfit> {
        let key = |name: &str, kind: &str| {
            let typed = self
                .attributes
                .iter()
                .any(|a| a.name == name && a.kind == "S");
            typed
                && self
                    .key_schema
                    .iter()
                    .any(|k| k.name == name && k.kind == kind)
        };
        if self.key_schema.len() == 2 && key("pk", "HASH") && key("sk", "RANGE") {
            return Ok(());
        }
        let found: Vec<String> = (self.key_schema.iter())
            .map(|k| format!("{} ({})", k.name, k.kind))
            .collect();
        Err(Unfit::KeySchema(format!(
            "the table's key is [{}]; fence needs partition key `pk` (S) and sort key `sk` (S)",
            found.join(", ")
        )))
    }

    fn check_replicas(&self) -> Result<(), Unfit> {
        let global = !self.replicas.is_empty() || self.global_version.is_some();
        if !global || self.consistency.as_deref() == Some("STRONG") {
            return Ok(());
        }
        let regions: Vec<&str> = (self.replicas.iter())
            .map(|r| r.region.as_deref().unwrap_or("?"))
            .collect();
        Err(Unfit::EventualReplicas(format!(
            "the table is a global table (replicas: [{}], consistency: {}): across Regions the \
             last writer wins and conditional writes do not fence; use a table without \
             replicas, or a global table in multi-Region strong consistency \
             (MultiRegionConsistency STRONG)",
            regions.join(", "),
            self.consistency
                .as_deref()
                .unwrap_or("EVENTUAL (the default)"),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn described(extra: serde_json::Value) -> TableDescription {
        let mut table = json!({
            "AttributeDefinitions": [
                { "AttributeName": "pk", "AttributeType": "S" },
                { "AttributeName": "sk", "AttributeType": "S" },
            ],
            "KeySchema": [
                { "AttributeName": "pk", "KeyType": "HASH" },
                { "AttributeName": "sk", "KeyType": "RANGE" },
            ],
        });
        for (k, v) in extra.as_object().unwrap() {
            table[k] = v.clone();
        }
        let answer: Described = serde_json::from_value(json!({ "Table": table })).unwrap();
        answer.table
    }

    #[test]
    fn a_table_in_one_region_with_fences_keys_is_fit() {
        assert_eq!(described(json!({})).judge(), Ok(()));
    }

    #[test]
    fn replicas_are_refused_unless_strongly_consistent() {
        let replicas = json!([{ "RegionName": "us-east-1" }, { "RegionName": "eu-west-1" }]);
        let eventual = described(json!({ "Replicas": replicas }));
        assert!(
            matches!(eventual.judge(), Err(Unfit::EventualReplicas(why)) if why.contains("eu-west-1"))
        );
        let explicit =
            described(json!({ "Replicas": replicas, "MultiRegionConsistency": "EVENTUAL" }));
        assert!(matches!(explicit.judge(), Err(Unfit::EventualReplicas(_))));
        let legacy = described(json!({ "GlobalTableVersion": "2017.11.29" }));
        assert!(matches!(legacy.judge(), Err(Unfit::EventualReplicas(_))));
        let strong = described(json!({ "Replicas": replicas, "MultiRegionConsistency": "STRONG" }));
        assert_eq!(strong.judge(), Ok(()));
    }

    #[test]
    fn another_key_schema_is_refused() {
        let hash_only = described(json!({
            "KeySchema": [{ "AttributeName": "pk", "KeyType": "HASH" }],
        }));
        assert!(matches!(hash_only.judge(), Err(Unfit::KeySchema(_))));
        let numeric = described(json!({
            "AttributeDefinitions": [
                { "AttributeName": "pk", "AttributeType": "S" },
                { "AttributeName": "sk", "AttributeType": "N" },
            ],
        }));
        assert!(matches!(numeric.judge(), Err(Unfit::KeySchema(_))));
    }
}
