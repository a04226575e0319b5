//! An admission's JSON patch as it is made: json-patch operations, and the sidecars and volumes
//! that go in as their Watcher's spec has them, each over that spec's JSON shared
//! ([`watcher_api::Written`]) rather than copied into every pod's patch. The webhook writes it
//! as text from there ([`Patch::write`]); whoever applies it reads the operations
//! ([`Patch::operations`], made at the first read).

use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use serde_json::{Map, Value};
use watcher_api::Written;

use crate::json::write;

/// A JSON object read and set by key: a plain object, or a sidecar over its spec's fields.
pub(crate) trait Fields {
    /// The field `key`.
    fn field(&self, key: &str) -> Option<&Value>;
    /// The field `key`, to change in place.
    fn field_mut(&mut self, key: &str) -> Option<&mut Value>;
    /// Sets the field `key`.
    fn set(&mut self, key: &str, value: Value);
}

/// Anything but an object has no fields, and takes none.
impl Fields for Value {
    fn field(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }

    fn field_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.get_mut(key)
    }

    fn set(&mut self, key: &str, value: Value) {
        if let Value::Object(fields) = self {
            fields.insert(key.to_owned(), value);
        }
    }
}

/// A Watcher's sidecar as it goes into one pod: the fields of its spec's container, shared,
/// under those this pod's injection sets (a field changed in place is copied first).
#[derive(Clone, Debug)]
pub(crate) struct Sidecar {
    spec: Arc<Written>,
    own: Map<String, Value>,
}

impl Sidecar {
    /// The container of `spec` as it is.
    pub(crate) fn of(spec: Arc<Written>) -> Self {
        Self { spec, own: Map::new() }
    }

    /// The container as one JSON value.
    pub(crate) fn to_value(&self) -> Value {
        let mut fields = self.spec.container().clone();
        fields.extend(self.own.iter().map(|(key, value)| (key.clone(), value.clone())));
        Value::Object(fields)
    }

    /// Appends the container's JSON: what [`Sidecar::to_value`] serialises to, byte for byte
    /// (both maps are ordered by key), the spec's fields copied as text.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        let mut own = self.own.iter().peekable();
        let mut first = true;
        let mut field = |out: &mut Vec<u8>, key: &str| {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            write::string(out, key);
            out.push(b':');
        };
        for (key, _, text) in self.spec.container_fields() {
            while let Some((set, value)) = own.next_if(|(set, _)| set.as_str() < key) {
                field(out, set);
                write::value(out, value);
            }
            if let Some((set, value)) = own.next_if(|(set, _)| set.as_str() == key) {
                field(out, set);
                write::value(out, value);
            } else {
                field(out, key);
                out.extend_from_slice(text.as_bytes());
            }
        }
        for (set, value) in own {
            field(out, set);
            write::value(out, value);
        }
        out.push(b'}');
    }
}

impl Fields for Sidecar {
    fn field(&self, key: &str) -> Option<&Value> {
        self.own.get(key).or_else(|| self.spec.container().get(key))
    }

    fn field_mut(&mut self, key: &str) -> Option<&mut Value> {
        if !self.own.contains_key(key) {
            let value = self.spec.container().get(key)?.clone();
            self.own.insert(key.to_owned(), value);
        }
        self.own.get_mut(key)
    }

    fn set(&mut self, key: &str, value: Value) {
        self.own.insert(key.to_owned(), value);
    }
}

/// One operation of a [`Patch`].
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// Any operation, as json-patch has it.
    Json(PatchOperation),
    /// `add` of a sidecar at `path`, alone or (`listed`) as the one entry of a new list.
    Sidecar { path: PointerBuf, listed: bool, sidecar: Sidecar },
    /// `add` of a Watcher's volume, the same.
    Volume { path: PointerBuf, listed: bool, spec: Arc<Written> },
}

impl Op {
    /// Where an `add` adds; `None` for any other operation.
    pub(crate) fn added_at(&self) -> Option<&PointerBuf> {
        match self {
            Op::Json(PatchOperation::Add(add)) => Some(&add.path),
            Op::Sidecar { path, .. } | Op::Volume { path, .. } => Some(path),
            Op::Json(_) => None,
        }
    }

    fn operation(&self) -> PatchOperation {
        let added = |path: &PointerBuf, listed: bool, value: Value| {
            let value = if listed { Value::Array(vec![value]) } else { value };
            PatchOperation::Add(AddOperation { path: path.clone(), value })
        };
        match self {
            Op::Json(operation) => operation.clone(),
            Op::Sidecar { path, listed, sidecar } => added(path, *listed, sidecar.to_value()),
            Op::Volume { path, listed, spec } => added(path, *listed, spec.volume().cloned().unwrap_or_default()),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        let (path, listed) = match self {
            Op::Json(operation) => return write::patch_operation(out, operation),
            Op::Sidecar { path, listed, .. } | Op::Volume { path, listed, .. } => (path, *listed),
        };
        out.extend_from_slice(b"{\"op\":\"add\",\"path\":");
        write::string(out, path.as_str());
        out.extend_from_slice(b",\"value\":");
        if listed {
            out.push(b'[');
        }
        match self {
            Op::Sidecar { sidecar, .. } => sidecar.write(out),
            Op::Volume { spec, .. } => out.extend_from_slice(spec.volume_text().unwrap_or("null").as_bytes()),
            Op::Json(_) => {}
        }
        if listed {
            out.push(b']');
        }
        out.push(b'}');
    }
}

/// The JSON patch of one admission: its operations in order, read as json-patch operations
/// ([`Patch::operations`], or through `Deref`) or written as JSON ([`Patch::write`]).
#[derive(Clone, Default)]
pub struct Patch {
    ops: Vec<Op>,
    /// The operations as json-patch's, made at the first read after a change.
    operations: OnceLock<Vec<PatchOperation>>,
}

impl Patch {
    /// An empty patch with room for `capacity` operations.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self { ops: Vec::with_capacity(capacity), operations: OnceLock::new() }
    }

    /// Whether the patch has no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// How many operations it has.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Appends `operation`.
    pub fn push(&mut self, operation: PatchOperation) {
        self.push_op(Op::Json(operation));
    }

    pub(crate) fn push_op(&mut self, op: Op) {
        self.operations = OnceLock::new();
        self.ops.push(op);
    }

    /// The operations as they are made.
    pub(crate) fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// The operations, to change in place.
    pub(crate) fn ops_mut(&mut self) -> &mut [Op] {
        self.operations = OnceLock::new();
        &mut self.ops
    }

    /// The operations as json-patch applies them.
    pub fn operations(&self) -> &[PatchOperation] {
        self.operations.get_or_init(|| self.ops.iter().map(Op::operation).collect())
    }

    /// Appends the patch as JSON: what serialising [`Patch::operations`] gives, byte for byte.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        for (i, op) in self.ops.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            op.write(out);
        }
        out.push(b']');
    }
}

impl Extend<PatchOperation> for Patch {
    fn extend<I: IntoIterator<Item = PatchOperation>>(&mut self, operations: I) {
        self.operations = OnceLock::new();
        self.ops.extend(operations.into_iter().map(Op::Json));
    }
}

impl From<Vec<PatchOperation>> for Patch {
    fn from(operations: Vec<PatchOperation>) -> Self {
        Self { ops: operations.into_iter().map(Op::Json).collect(), operations: OnceLock::new() }
    }
}

impl Deref for Patch {
    type Target = [PatchOperation];

    fn deref(&self) -> &[PatchOperation] {
        self.operations()
    }
}

impl PartialEq for Patch {
    fn eq(&self, other: &Self) -> bool {
        self.operations() == other.operations()
    }
}

impl std::fmt::Debug for Patch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.operations().fmt(f)
    }
}

impl serde::Serialize for Patch {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.operations().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec() -> watcher_api::WatcherSpec {
        serde_json::from_value(json!({
            "container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["sh", "-c", "tail -F \"/x\""],
                          "env": [{"name": "A", "value": "1"}]},
            "volume": {"name": "logs", "emptyDir": {}}}))
        .expect("spec")
    }

    fn written(sidecar: &Sidecar) -> Vec<u8> {
        let mut out = Vec::new();
        sidecar.write(&mut out);
        out
    }

    /// A sidecar is its spec's container with the fields set for the pod: as a value, and as
    /// text, which is that value serialised, with fields set before, between and after the
    /// spec's, and one of the spec's changed in place.
    #[test]
    fn a_sidecar_is_its_spec_under_what_the_pod_sets() {
        let spec = spec();
        let mut sidecar = Sidecar::of(spec.written().clone());
        assert_eq!(sidecar.to_value(), serde_json::to_value(&spec.container).expect("serialises"));
        assert_eq!(written(&sidecar), serde_json::to_vec(&sidecar.to_value()).expect("serialises"));
        sidecar.set("args", json!(["a"]));
        sidecar.set("restartPolicy", json!("Always"));
        sidecar.set("volumeMounts", json!([{"name": "logs", "mountPath": "/logs"}]));
        if let Some(Value::Array(env)) = sidecar.field_mut("env") {
            env.push(json!({"name": "B", "value": "2"}));
        }
        sidecar.set("image", json!("mirror.internal/busybox:1.36"));
        let value = sidecar.to_value();
        assert_eq!(value["env"], json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]));
        assert_eq!(value["image"], "mirror.internal/busybox:1.36");
        assert_eq!(value["command"], json!(["sh", "-c", "tail -F \"/x\""]), "the spec's, as it is");
        assert_eq!(sidecar.field("restartPolicy"), Some(&json!("Always")));
        assert_eq!(written(&sidecar), serde_json::to_vec(&value).expect("serialises"));
        assert_eq!(spec.written().container()["env"], json!([{"name": "A", "value": "1"}]), "the spec's untouched");
    }

    /// A patch of every kind of operation is written as its operations serialise, and read as
    /// them; a change after a read is read.
    #[test]
    fn a_patch_is_written_as_its_operations_serialise() {
        let spec = spec();
        let pointer = |p: &str| PointerBuf::parse(p).expect("pointer");
        let mut patch = Patch::default();
        assert!(patch.is_empty());
        let sidecar = Sidecar::of(spec.written().clone());
        patch.push_op(Op::Sidecar { path: pointer("/spec/initContainers"), listed: true, sidecar: sidecar.clone() });
        patch.push_op(Op::Sidecar { path: pointer("/spec/containers/-"), listed: false, sidecar });
        patch.push_op(Op::Volume { path: pointer("/spec/volumes/-"), listed: false, spec: spec.written().clone() });
        patch.push(PatchOperation::Add(AddOperation { path: pointer("/metadata/labels"), value: json!({"a": "b"}) }));
        assert_eq!(patch.len(), 4);
        assert_eq!(patch[0].path().as_str(), "/spec/initContainers");
        let mut out = Vec::new();
        patch.write(&mut out);
        assert_eq!(out, serde_json::to_vec(patch.operations()).expect("serialises"));
        let value: Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(value[0]["value"][0]["name"], "log-watcher");
        assert_eq!(value[2]["value"], json!({"name": "logs", "emptyDir": {}}));
        patch.extend([PatchOperation::Add(AddOperation { path: pointer("/x"), value: json!(1) })]);
        assert_eq!(patch.operations().len(), 5, "read again after a change");
        assert_eq!(Patch::from(patch.operations().to_vec()), patch);
    }
}
