package onnx

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fedcalib/fedcalib/onnx/onnxpb"
)

// SetIRVersion sets the model's IR version. It panics if v < 1.
func (m *Model) SetIRVersion(v int64) {
	if v < 1 {
		panic("onnx: SetIRVersion: IR version must be positive")
	}
	if m.ir == 0 && m.pb.GetIrVersion() == v {
		return
	}
	m.ir = v
	m.pb.IrVersion = proto.Int64(v)
}

// SetOpsetVersion sets the version of the operator set the model imports
// for domain, adding an import when the model has none for it. The default
// domain may be named "" or "ai.onnx"; a new import for it is written with
// the empty name. If the model imports a domain twice, the first import is
// changed and the others are removed. It panics if version < 1.
//
// Changing the version of an imported operator set changes the meaning of
// the nodes already in the graph that use it; it is the caller's job to
// check they mean the same at the new version.
func (m *Model) SetOpsetVersion(domain string, version int64) {
	if version < 1 {
		panic("onnx: SetOpsetVersion: version must be positive")
	}
	d := canonicalDomain(domain)
	m.opsets = setOpset(m.opsets, Opset{Domain: d, Version: version})

	var kept []*onnxpb.OperatorSetIdProto
	found := false
	for _, o := range m.pb.OpsetImport {
		if canonicalDomain(o.GetDomain()) == d {
			if found {
				continue
			}
			found = true
			o.Version = proto.Int64(version)
		}
		kept = append(kept, o)
	}
	if !found {
		kept = append(kept, newOpsetProto(d, version))
	}
	m.pb.OpsetImport = kept
}

// SetMetadata sets the value of the metadata_props entry key, adding an
// entry after the existing ones when the model has none with that key. If
// several entries have the key, the first is changed and the others are
// removed.
func (m *Model) SetMetadata(key, value string) {
	m.meta = setProp(m.meta, Prop{Key: key, Value: value})

	var kept []*onnxpb.StringStringEntryProto
	found := false
	for _, p := range m.pb.MetadataProps {
		if p.GetKey() == key {
			if found {
				continue
			}
			found = true
			p.Value = proto.String(value)
		}
		kept = append(kept, p)
	}
	if !found {
		kept = append(kept, newPropProto(key, value))
	}
	m.pb.MetadataProps = kept
}

// AddNodes appends nodes to the end of the graph's node list. Nodes must
// come in topological order, so a node may use the outputs of the nodes
// already in the graph and of the nodes before it in the list. The nodes
// are copied. It panics if a node is nil.
func (m *Model) AddNodes(nodes ...*onnxpb.NodeProto) {
	for _, n := range nodes {
		if n == nil {
			panic("onnx: AddNodes: nil node")
		}
		m.appendGraph(graphNode, n)
		m.pb.Graph.Node = append(m.pb.Graph.Node, proto.Clone(n).(*onnxpb.NodeProto))
	}
}

// AddInitializers appends constant tensors to the graph's initializers.
// The tensors are copied. It panics if a tensor is nil.
func (m *Model) AddInitializers(tensors ...*onnxpb.TensorProto) {
	for _, t := range tensors {
		if t == nil {
			panic("onnx: AddInitializers: nil tensor")
		}
		m.appendGraph(graphInitializer, t)
		m.pb.Graph.Initializer = append(m.pb.Graph.Initializer, proto.Clone(t).(*onnxpb.TensorProto))
	}
}

// AddOutputs appends outputs to the graph's outputs, after the existing
// ones. The values are copied. It panics if a value is nil.
func (m *Model) AddOutputs(values ...*onnxpb.ValueInfoProto) {
	for _, v := range values {
		if v == nil {
			panic("onnx: AddOutputs: nil value")
		}
		m.appendGraph(graphOutput, v)
		m.pb.Graph.Output = append(m.pb.Graph.Output, proto.Clone(v).(*onnxpb.ValueInfoProto))
	}
}

// appendGraph records msg as a new occurrence of GraphProto field num.
func (m *Model) appendGraph(num protowire.Number, msg proto.Message) {
	m.graphTail = protowire.AppendTag(m.graphTail, num, protowire.BytesType)
	m.graphTail = protowire.AppendBytes(m.graphTail, marshal(msg))
}

// appendOpset appends the opset_import record f of the source to out,
// changed by the recorded opset edits; done marks the edits applied.
func (m *Model) appendOpset(out []byte, f wireField, done []bool) []byte {
	raw, val := m.src[f.start:f.end], m.src[f.val:f.end]
	var o onnxpb.OperatorSetIdProto
	if proto.Unmarshal(val, &o) != nil {
		return append(out, raw...) // unreachable: the model parsed
	}
	d := canonicalDomain(o.GetDomain())
	for j, e := range m.opsets {
		if e.Domain != d {
			continue
		}
		if done[j] {
			return out // a second import of an edited domain: drop it
		}
		done[j] = true
		if o.Version != nil && *o.Version == e.Version {
			return append(out, raw...)
		}
		v := protowire.AppendVarint(protowire.AppendTag(nil, entryValue, protowire.VarintType), uint64(e.Version))
		return appendMessageField(out, modelOpsetImport, spliceField(val, entryValue, protowire.VarintType, v))
	}
	return append(out, raw...)
}

// appendNewOpsets appends an opset_import record for each edit not yet
// applied, marking it done.
func (m *Model) appendNewOpsets(out []byte, done []bool) []byte {
	for j, e := range m.opsets {
		if !done[j] {
			done[j] = true
			out = appendMessageField(out, modelOpsetImport, marshal(newOpsetProto(e.Domain, e.Version)))
		}
	}
	return out
}

// appendMeta is appendOpset for metadata_props records.
func (m *Model) appendMeta(out []byte, f wireField, done []bool) []byte {
	raw, val := m.src[f.start:f.end], m.src[f.val:f.end]
	var p onnxpb.StringStringEntryProto
	if proto.Unmarshal(val, &p) != nil {
		return append(out, raw...) // unreachable: the model parsed
	}
	for j, e := range m.meta {
		if e.Key != p.GetKey() {
			continue
		}
		if done[j] {
			return out
		}
		done[j] = true
		if p.Value != nil && *p.Value == e.Value {
			return append(out, raw...)
		}
		v := protowire.AppendString(protowire.AppendTag(nil, entryValue, protowire.BytesType), e.Value)
		return appendMessageField(out, modelMetadataProps, spliceField(val, entryValue, protowire.BytesType, v))
	}
	return append(out, raw...)
}

// appendNewMeta is appendNewOpsets for metadata_props records.
func (m *Model) appendNewMeta(out []byte, done []bool) []byte {
	for j, e := range m.meta {
		if !done[j] {
			done[j] = true
			out = appendMessageField(out, modelMetadataProps, marshal(newPropProto(e.Key, e.Value)))
		}
	}
	return out
}

// spliceField returns a copy of the message msg with its first record of
// field num with wire type typ replaced by rec (a whole record: tag and
// value) and its other such records removed; rec is appended when msg has
// none. Every other byte of msg is kept, including records of field num
// with another wire type, which decoders keep as unknown fields. msg must
// be well-formed.
func spliceField(msg []byte, num protowire.Number, typ protowire.Type, rec []byte) []byte {
	out := make([]byte, 0, len(msg)+len(rec))
	done := false
	for i := 0; i < len(msg); {
		n, t, k := protowire.ConsumeField(msg[i:])
		if k < 0 {
			panic("onnx: spliceField: malformed message") // the model parsed, so unreachable
		}
		switch {
		case n != num || t != typ:
			out = append(out, msg[i:i+k]...)
		case !done:
			out = append(out, rec...)
			done = true
		}
		i += k
	}
	if !done {
		out = append(out, rec...)
	}
	return out
}

func appendMessageField(out []byte, num protowire.Number, msg []byte) []byte {
	out = protowire.AppendTag(out, num, protowire.BytesType)
	return protowire.AppendBytes(out, msg)
}

func appendVarintField(out []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(out, num, protowire.VarintType), v)
}

// marshal encodes msg deterministically. It panics on failure, which
// onnx.proto (proto2, no required fields) makes impossible for valid Go
// values.
func marshal(msg proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		panic("onnx: " + err.Error())
	}
	return b
}

func newOpsetProto(domain string, version int64) *onnxpb.OperatorSetIdProto {
	return &onnxpb.OperatorSetIdProto{Domain: proto.String(domain), Version: proto.Int64(version)}
}

func newPropProto(key, value string) *onnxpb.StringStringEntryProto {
	return &onnxpb.StringStringEntryProto{Key: proto.String(key), Value: proto.String(value)}
}

// canonicalDomain maps the two names of the default operator domain to "".
func canonicalDomain(d string) string {
	if d == "ai.onnx" {
		return ""
	}
	return d
}

func setOpset(s []Opset, o Opset) []Opset {
	for i := range s {
		if s[i].Domain == o.Domain {
			s[i] = o
			return s
		}
	}
	return append(s, o)
}

func setProp(s []Prop, p Prop) []Prop {
	for i := range s {
		if s[i].Key == p.Key {
			s[i] = p
			return s
		}
	}
	return append(s, p)
}
