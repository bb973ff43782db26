//! Resolving the intrinsic functions of a deployment's template: `Ref`, `Fn::Sub`, `Fn::If`,
//! `Fn::GetAtt`, `Fn::Join`, and the conditions' `Fn::Equals`, `Fn::Not`, `Fn::And`, `Fn::Or`.

use serde_json::{Map, Value};

use super::{Deployment, TemplateError, err, scalar_text};

/// The intrinsic function a JSON object spells, if it is one.
fn intrinsic(v: &Value) -> Option<(&str, &Value)> {
    let map = v.as_object()?;
    if map.len() != 1 {
        return None;
    }
    let (k, arg) = map.iter().next()?;
    (k == "Ref" || k == "Condition" || k.starts_with("Fn::")).then_some((k.as_str(), arg))
}

impl Deployment<'_> {
    /// `v` with every intrinsic function resolved (`None`: `AWS::NoValue`); `at` says where, in errors.
    pub fn resolve(&self, v: &Value, at: &str) -> Result<Option<Value>, TemplateError> {
        self.eval(v, at)
    }

    pub(super) fn eval(&self, v: &Value, at: &str) -> Result<Option<Value>, TemplateError> {
        if let Some((function, arg)) = intrinsic(v) {
            return self.call(function, arg, at);
        }
        Ok(Some(match v {
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.extend(self.eval(item, at)?);
                }
                Value::Array(out)
            }
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, item) in map {
                    if let Some(resolved) = self.eval(item, &format!("{at}.{k}"))? {
                        out.insert(k.clone(), resolved);
                    }
                }
                Value::Object(out)
            }
            scalar => scalar.clone(),
        }))
    }

    fn args<'a>(&self, function: &str, arg: &'a Value, n: usize, at: &str) -> Result<&'a [Value], TemplateError> {
        match arg.as_array() {
            Some(items) if items.len() == n || n == 0 => Ok(items),
            _ => err(format!("{at}: {function} wants {n} arguments, has {arg}")),
        }
    }

    fn call(&self, function: &str, arg: &Value, at: &str) -> Result<Option<Value>, TemplateError> {
        let text_of = |v: &Value| -> Result<String, TemplateError> {
            match self.eval(v, at)? {
                Some(resolved) => {
                    scalar_text(&resolved).ok_or_else(|| TemplateError(format!("{at}: {resolved} is not text")))
                }
                None => err(format!("{at}: AWS::NoValue where text is needed")),
            }
        };
        match function {
            "Ref" => self.reference(arg.as_str().unwrap_or_default(), at),
            "Condition" => Ok(Some(Value::Bool(self.condition(arg.as_str().unwrap_or_default())?))),
            "Fn::If" => {
                let a = self.args(function, arg, 3, at)?;
                let holds = self.condition(a[0].as_str().unwrap_or_default())?;
                self.eval(&a[if holds { 1 } else { 2 }], at)
            }
            "Fn::Equals" => {
                let a = self.args(function, arg, 2, at)?;
                Ok(Some(Value::Bool(text_of(&a[0])? == text_of(&a[1])?)))
            }
            "Fn::Not" => {
                let a = self.args(function, arg, 1, at)?;
                Ok(Some(Value::Bool(!self.truth(&a[0], at)?)))
            }
            "Fn::And" | "Fn::Or" => {
                let mut values = Vec::new();
                for c in self.args(function, arg, 0, at)? {
                    values.push(self.truth(c, at)?);
                }
                let all = function == "Fn::And";
                Ok(Some(Value::Bool(if all {
                    values.iter().all(|b| *b)
                } else {
                    values.iter().any(|b| *b)
                })))
            }
            "Fn::GetAtt" => {
                let a = self.args(function, arg, 2, at)?;
                let (id, attr) = (a[0].as_str().unwrap_or_default(), a[1].as_str().unwrap_or_default());
                Ok(Some(self.attribute(id, attr, at)?))
            }
            "Fn::Join" => {
                let a = self.args(function, arg, 2, at)?;
                let separator = a[0].as_str().unwrap_or_default();
                let parts = match self.eval(&a[1], at)? {
                    Some(Value::Array(parts)) => parts,
                    Some(Value::String(s)) if s.is_empty() => Vec::new(),
                    Some(Value::String(s)) => s.split(',').map(|p| Value::String(p.to_owned())).collect(),
                    other => return err(format!("{at}: Fn::Join of {other:?}")),
                };
                let texts: Option<Vec<String>> = parts.iter().map(scalar_text).collect();
                let texts = texts.ok_or_else(|| TemplateError(format!("{at}: Fn::Join of a non-scalar")))?;
                Ok(Some(Value::String(texts.join(separator))))
            }
            "Fn::Sub" => {
                let (text, vars) = match arg {
                    Value::String(s) => (s.as_str(), None),
                    Value::Array(a) if a.len() == 2 => (a[0].as_str().unwrap_or_default(), a[1].as_object()),
                    _ => return err(format!("{at}: Fn::Sub of {arg}")),
                };
                Ok(Some(Value::String(self.substitute(text, vars, at)?)))
            }
            other => err(format!("{at}: {other} is not resolved by the local stack")),
        }
    }

    /// `Fn::Sub`: `${Name}` (a variable, parameter, pseudo parameter or resource), `${Id.Attr}`,
    /// and `${!Literal}`.
    fn substitute(&self, text: &str, vars: Option<&Map<String, Value>>, at: &str) -> Result<String, TemplateError> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                return err(format!("{at}: an unclosed ${{ in {text:?}"));
            };
            let name = &after[..end];
            if let Some(literal) = name.strip_prefix('!') {
                out.push_str("${");
                out.push_str(literal);
                out.push('}');
            } else {
                let value = match (vars.and_then(|m| m.get(name)), name.split_once('.')) {
                    (Some(v), _) => self.eval(v, at)?,
                    (None, Some((id, attr))) if !name.starts_with("AWS::") => Some(self.attribute(id, attr, at)?),
                    (None, _) => self.reference(name, at)?,
                };
                let value = value.as_ref().and_then(scalar_text);
                out.push_str(&value.ok_or_else(|| TemplateError(format!("{at}: ${{{name}}} is not text")))?);
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// The resources `v` refers to (`Ref`, `Fn::GetAtt`, and `${...}` in `Fn::Sub`), parameters and
/// pseudo parameters included (the caller keeps the resources it knows).
pub fn references(v: &Value, out: &mut Vec<String>) {
    match intrinsic(v) {
        Some(("Ref", Value::String(name))) => out.push(name.clone()),
        Some(("Fn::GetAtt", Value::Array(a))) => out.extend(a.first().and_then(Value::as_str).map(str::to_owned)),
        Some(("Fn::Sub", arg)) => {
            let text = arg
                .as_str()
                .or_else(|| arg.get(0).and_then(Value::as_str))
                .unwrap_or_default();
            for piece in text.split("${").skip(1) {
                let name = piece.split('}').next().unwrap_or_default();
                out.push(name.split('.').next().unwrap_or_default().to_owned());
            }
            if let Some(vars) = arg.get(1) {
                references(vars, out);
            }
        }
        _ => match v {
            Value::Array(items) => items.iter().for_each(|i| references(i, out)),
            Value::Object(map) => map.values().for_each(|i| references(i, out)),
            _ => {}
        },
    }
}
