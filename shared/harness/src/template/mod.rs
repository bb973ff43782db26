//! The infrastructure template, `infra/template.yaml`, read by the code: the one definition of a
//! deployment's queues, tables and bucket. AWS builds them from it (CloudFormation); the local
//! stack and every integration test build them from it too ([`crate::provision`]), so a table,
//! an index or a queue setting the code relies on and the template lacks fails a test by use.
//!
//! The reader resolves the intrinsic functions the template's resources use ([`resolve`]); any
//! other is an error naming it, never a guess. The code's side of the template (the variables
//! each function reads, the outputs `dlqctl --stack` reads) is checked in `deployment`'s tests.

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::OnceLock;

use recon_core::resources::ResourceNames;

/// The template, as built into this binary.
pub const TEMPLATE_YAML: &str = include_str!("../../../../infra/template.yaml");

/// Where errors say the template is.
pub const TEMPLATE_PATH: &str = "infra/template.yaml";

pub use recon_aws::deployment::ids;

/// The resource types the local stack builds from the template.
pub const QUEUE: &str = "AWS::SQS::Queue";
pub const TABLE: &str = "AWS::DynamoDB::Table";
pub const BUCKET: &str = "AWS::S3::Bucket";

/// What is wrong with the template (or with a value given for one of its parameters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{TEMPLATE_PATH}: {0}")]
pub struct TemplateError(pub String);

fn err<T>(detail: impl Into<String>) -> Result<T, TemplateError> {
    Err(TemplateError(detail.into()))
}

/// A parsed template: its sections as JSON, the short-form tags (`!Ref`, `!Sub`...) in their
/// long form, as CloudFormation reads them.
#[derive(Debug, Clone)]
pub struct Template {
    doc: Value,
}

impl Template {
    /// The template built into this binary (parsed once).
    pub fn ours() -> Result<&'static Template, TemplateError> {
        static OURS: OnceLock<Result<Template, TemplateError>> = OnceLock::new();
        OURS.get_or_init(|| Template::parse(TEMPLATE_YAML))
            .as_ref()
            .map_err(Clone::clone)
    }

    pub fn parse(yaml: &str) -> Result<Template, TemplateError> {
        let raw: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(yaml).map_err(|e| TemplateError(format!("not YAML: {e}")))?;
        let doc = long_form(raw)?;
        if !doc.get("Resources").is_some_and(Value::is_object) {
            return err("no Resources");
        }
        Ok(Template { doc })
    }

    fn section(&self, name: &str) -> &Map<String, Value> {
        static EMPTY: OnceLock<Map<String, Value>> = OnceLock::new();
        self.doc
            .get(name)
            .and_then(Value::as_object)
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    /// Resource `id`'s declaration as written (intrinsic functions unresolved).
    pub fn declaration(&self, id: &str) -> Result<&Value, TemplateError> {
        self.section("Resources")
            .get(id)
            .map_or_else(|| err(format!("no resource {id}")), Ok)
    }

    /// The part of the template at this JSON pointer, as written (`/Globals/Function`).
    pub fn raw(&self, pointer: &str) -> Option<&Value> {
        self.doc.pointer(pointer)
    }

    /// A parameter's declaration.
    pub fn parameter_declaration(&self, name: &str) -> Option<&Value> {
        self.section("Parameters").get(name)
    }

    /// The type of resource `id`.
    pub fn resource_type(&self, id: &str) -> Result<&str, TemplateError> {
        self.declaration(id)?
            .get("Type")
            .and_then(Value::as_str)
            .map_or_else(|| err(format!("resource {id} has no Type")), Ok)
    }

    /// The names this template gives a deployment with `prefix` in `account` and `region`.
    pub fn names_of(&self, prefix: &str, account: &str, region: &str) -> Result<ResourceNames, TemplateError> {
        self.deploy(account, region, &[("StackPrefix", Value::String(prefix.to_owned()))])?
            .names()
    }

    /// A deployment of this template with these parameter values (the others keep their
    /// defaults). Each value is checked against its parameter's declaration.
    pub fn deploy(
        &self,
        account: &str,
        region: &str,
        given: &[(&str, Value)],
    ) -> Result<Deployment<'_>, TemplateError> {
        let declared = self.section("Parameters");
        let mut parameters = BTreeMap::new();
        for (name, declaration) in declared {
            if let Some(default) = declaration.get("Default") {
                parameters.insert(name.clone(), default.clone());
            }
        }
        for (name, value) in given {
            let Some(declaration) = declared.get(*name) else {
                return err(format!("no parameter {name}"));
            };
            admissible(name, declaration, value)?;
            parameters.insert((*name).to_owned(), value.clone());
        }
        Ok(Deployment {
            template: self,
            parameters,
            account: account.to_owned(),
            region: region.to_owned(),
            created: BTreeMap::new(),
        })
    }
}

/// A parameter value must be one its declaration allows (`AllowedValues`, `MinValue`/`MaxValue`).
fn admissible(name: &str, declaration: &Value, value: &Value) -> Result<(), TemplateError> {
    let text = scalar_text(value).ok_or_else(|| TemplateError(format!("parameter {name}: not a scalar")))?;
    if let Some(allowed) = declaration.get("AllowedValues").and_then(Value::as_array)
        && !allowed.iter().any(|a| scalar_text(a).as_deref() == Some(text.as_str()))
    {
        return err(format!("parameter {name}={text} is not one of {allowed:?}"));
    }
    if declaration.get("Type").and_then(Value::as_str) == Some("Number") {
        let n: f64 = text
            .parse()
            .map_err(|_| TemplateError(format!("parameter {name}={text} is not a number")))?;
        let bound = |key: &str| declaration.get(key).and_then(Value::as_f64);
        if bound("MinValue").is_some_and(|min| n < min) || bound("MaxValue").is_some_and(|max| n > max) {
            return err(format!(
                "parameter {name}={text} is outside {:?}..={:?}",
                bound("MinValue"),
                bound("MaxValue")
            ));
        }
    }
    Ok(())
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// YAML with CloudFormation's short-form tags → JSON in the long form.
fn long_form(v: serde_yaml_ng::Value) -> Result<Value, TemplateError> {
    use serde_yaml_ng::Value as Y;
    Ok(match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(long_form).collect::<Result<_, _>>()?),
        Y::Mapping(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let key = match k {
                    Y::String(s) => s,
                    other => scalar_text(&long_form(other)?)
                        .ok_or_else(|| TemplateError("a key that is not a scalar".into()))?,
                };
                out.insert(key, long_form(v)?);
            }
            Value::Object(out)
        }
        Y::Tagged(tagged) => {
            let tag = tagged.tag.to_string();
            let name = tag.trim_start_matches('!');
            let inner = long_form(tagged.value)?;
            let (key, inner) = match (name, inner) {
                ("Ref" | "Condition", inner) => (name.to_owned(), inner),
                ("GetAtt", Value::String(dotted)) => {
                    let (id, attr) = dotted
                        .split_once('.')
                        .ok_or_else(|| TemplateError(format!("!GetAtt {dotted}: no attribute")))?;
                    ("Fn::GetAtt".to_owned(), serde_json::json!([id, attr]))
                }
                (other, inner) => (format!("Fn::{other}"), inner),
            };
            Value::Object(Map::from_iter([(key, inner)]))
        }
    })
}

/// What a created resource gives the resources after it: its `Ref` and its attributes.
#[derive(Debug, Clone, Default)]
pub struct Created {
    pub reference: String,
    pub attributes: BTreeMap<String, String>,
}

/// The template with a deployment's parameter values, account and region, and the resources
/// created so far (for `Ref` and `Fn::GetAtt` on them).
#[derive(Debug, Clone)]
pub struct Deployment<'t> {
    template: &'t Template,
    parameters: BTreeMap<String, Value>,
    account: String,
    region: String,
    created: BTreeMap<String, Created>,
}

impl<'t> Deployment<'t> {
    pub fn template(&self) -> &'t Template {
        self.template
    }

    /// Record what a created resource gives the ones after it.
    pub fn created(&mut self, id: &str, created: Created) {
        self.created.insert(id.to_owned(), created);
    }

    /// Whether the condition of this name holds.
    pub fn condition(&self, name: &str) -> Result<bool, TemplateError> {
        let Some(definition) = self.template.section("Conditions").get(name) else {
            return err(format!("no condition {name}"));
        };
        self.truth(definition, &format!("condition {name}"))
    }

    fn truth(&self, v: &Value, at: &str) -> Result<bool, TemplateError> {
        match self.eval(v, at)? {
            Some(Value::Bool(b)) => Ok(b),
            other => err(format!("{at}: {other:?} is not a condition")),
        }
    }

    /// Whether resource `id` is part of this deployment (its `Condition`, if any, holds).
    pub fn has(&self, id: &str) -> Result<bool, TemplateError> {
        match self.template.declaration(id)?.get("Condition").and_then(Value::as_str) {
            Some(condition) => self.condition(condition),
            None => Ok(true),
        }
    }

    /// The resources of these types in this deployment, each after those it refers to.
    pub fn resources_of(&self, types: &[&str]) -> Result<Vec<String>, TemplateError> {
        let mut chosen = Vec::new();
        for (id, resource) in self.template.section("Resources") {
            let kind = resource.get("Type").and_then(Value::as_str).unwrap_or_default();
            if types.contains(&kind) && self.has(id)? {
                chosen.push(id.clone());
            }
        }
        let mut ordered: Vec<String> = Vec::new();
        while ordered.len() < chosen.len() {
            let before = ordered.len();
            for id in &chosen {
                let mut refers = Vec::new();
                references(self.template.declaration(id)?, &mut refers);
                let ready = refers
                    .iter()
                    .all(|r| r == id || !chosen.contains(r) || ordered.contains(r));
                if !ordered.contains(id) && ready {
                    ordered.push(id.clone());
                }
            }
            if ordered.len() == before {
                return err(format!("a cycle of references among {chosen:?}"));
            }
        }
        Ok(ordered)
    }

    /// Resource `id`'s properties with every intrinsic function resolved (a property that resolves
    /// to `AWS::NoValue` is left out).
    pub fn properties(&self, id: &str) -> Result<Map<String, Value>, TemplateError> {
        let at = format!("{id}.Properties");
        match self.template.declaration(id)?.get("Properties") {
            None => Ok(Map::new()),
            Some(p) => match self.eval(p, &at)? {
                Some(Value::Object(map)) => Ok(map),
                other => err(format!("{at}: {other:?} is not a map")),
            },
        }
    }

    /// One resolved property of resource `id`, as text (a name).
    pub fn text(&self, id: &str, property: &str) -> Result<String, TemplateError> {
        let at = format!("{id}.Properties.{property}");
        let raw = self
            .template
            .declaration(id)?
            .get("Properties")
            .and_then(|p| p.get(property))
            .ok_or_else(|| TemplateError(format!("no {at}")))?;
        self.eval(raw, &at)?
            .as_ref()
            .and_then(scalar_text)
            .ok_or_else(|| TemplateError(format!("{at} is not text")))
    }

    /// The names this deployment gives its resources.
    pub fn names(&self) -> Result<ResourceNames, TemplateError> {
        use recon_core::resources::TableKind;
        let table = |kind| self.text(ids::table(kind), "TableName");
        Ok(ResourceNames {
            prefix: self.parameter("StackPrefix")?,
            main_queue: self.text(ids::MAIN_QUEUE, "QueueName")?,
            dead_letter_queue: self.text(ids::DEAD_LETTER_QUEUE, "QueueName")?,
            parking_queue: self.text(ids::PARKING_QUEUE, "QueueName")?,
            ledger_table: table(TableKind::Ledger)?,
            envelope_table: table(TableKind::Envelopes)?,
            reference_table: table(TableKind::Reference)?,
            audit_table: table(TableKind::Audit)?,
            dedup_table: table(TableKind::Dedup)?,
            quarantine_bucket: self.text(ids::QUARANTINE_BUCKET, "BucketName")?,
            account: self.account.clone(),
            sweep_schedule: self.text(ids::REPLAY_SCHEDULE, "Name")?,
            seal_schedule: self.text(ids::SEAL_SCHEDULE, "Name")?,
        })
    }

    /// The environment function `id` is given: `Globals.Function`'s variables, then its own (as
    /// SAM merges them), each resolved.
    pub fn function_environment(&self, id: &str) -> Result<BTreeMap<String, String>, TemplateError> {
        let shared = self.template.doc.pointer("/Globals/Function/Environment/Variables");
        let own = self
            .template
            .declaration(id)?
            .pointer("/Properties/Environment/Variables");
        let mut env = BTreeMap::new();
        for variables in [shared, own].into_iter().flatten() {
            let at = format!("{id} environment");
            let Some(Value::Object(resolved)) = self.eval(variables, &at)? else {
                return err(format!("{at} is not a map"));
            };
            for (k, v) in resolved {
                let text = scalar_text(&v).ok_or_else(|| TemplateError(format!("{at}: {k} is not text")))?;
                env.insert(k, text);
            }
        }
        Ok(env)
    }

    /// Output `key` of this deployment (`None`: the template has no such output, or its condition
    /// does not hold here).
    pub fn output(&self, key: &str) -> Result<Option<String>, TemplateError> {
        let Some(output) = self.template.section("Outputs").get(key) else {
            return Ok(None);
        };
        if let Some(condition) = output.get("Condition").and_then(Value::as_str)
            && !self.condition(condition)?
        {
            return Ok(None);
        }
        let at = format!("output {key}");
        let value = output
            .get("Value")
            .ok_or_else(|| TemplateError(format!("{at} has no Value")))?;
        Ok(self.eval(value, &at)?.as_ref().and_then(scalar_text))
    }

    /// The value parameter `name` has in this deployment.
    pub fn parameter(&self, name: &str) -> Result<String, TemplateError> {
        self.parameters
            .get(name)
            .and_then(scalar_text)
            .ok_or_else(|| TemplateError(format!("parameter {name} has no value")))
    }

    /// The value `Ref name` has here (`None`: `AWS::NoValue`).
    fn reference(&self, name: &str, at: &str) -> Result<Option<Value>, TemplateError> {
        let text = |s: &str| Ok(Some(Value::String(s.to_owned())));
        match name {
            "AWS::NoValue" => Ok(None),
            "AWS::AccountId" => text(&self.account),
            "AWS::Region" => text(&self.region),
            "AWS::Partition" => text("aws"),
            "AWS::URLSuffix" => text("amazonaws.com"),
            // The stack as CloudFormation would name it: its prefix, in this account and region.
            "AWS::StackId" => {
                let stack = self.parameter("StackPrefix").unwrap_or_else(|_| "stack".into());
                let id = format!(
                    "arn:aws:cloudformation:{}:{}:stack/{stack}/local",
                    self.region, self.account
                );
                text(&id)
            }
            _ => {
                if let Some(v) = self.parameters.get(name) {
                    return Ok(Some(v.clone()));
                }
                if let Some(c) = self.created.get(name) {
                    return text(&c.reference);
                }
                err(format!("{at}: Ref {name}: no such parameter, or not created yet"))
            }
        }
    }

    fn attribute(&self, id: &str, attr: &str, at: &str) -> Result<Value, TemplateError> {
        self.created
            .get(id)
            .and_then(|c| c.attributes.get(attr))
            .map(|v| Value::String(v.clone()))
            .ok_or_else(|| TemplateError(format!("{at}: Fn::GetAtt {id}.{attr}: not created yet")))
    }

    /// What created resource `id` gives as its `Ref` (a queue's URL, a table's name).
    pub fn reference_of(&self, id: &str) -> Option<&str> {
        self.created.get(id).map(|c| c.reference.as_str())
    }

    /// Attribute `attr` of created resource `id` (a queue's `Arn`).
    pub fn attribute_of(&self, id: &str, attr: &str) -> Option<&str> {
        self.created.get(id)?.attributes.get(attr).map(String::as_str)
    }
}

mod resolve;

pub use resolve::references;

#[cfg(test)]
mod contract;
#[cfg(test)]
mod tests;
