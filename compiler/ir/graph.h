// The graph IR of clusterjit: a Graph owns its Nodes and Values; edges (Node::inputs, Value::producer)
// are non-owning pointers into the same Graph.
//
//  * A Value is one edge (a tensor, or a sequence / optional: Value::kind): a graph input, a constant
//    (initializer / Constant node, `constant` set), a capture (a name a subgraph reads from an enclosing
//    graph), or a node output. It carries a dtype and a Shape whose dims may be unknown (-1) and carry a
//    symbol ("batch").
//  * A Node is one operator (ONNX op_type + domain) with attributes. Optional inputs that are absent are
//    nullptr. Subgraph-bearing nodes (If, Loop, Scan) read outer-scope values through `implicit_inputs`,
//    matched by name to their subgraphs' captures.
//
// Thread-safety: a Graph is not internally synchronized; share one only for reading.
#ifndef CJIT_COMPILER_IR_GRAPH_H_
#define CJIT_COMPILER_IR_GRAPH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/tensor.h"

namespace cjit {

class Graph;
class Node;

// One dimension: a known size (>= 0), or unknown (-1) with an optional symbol.
struct Dim {
  int64_t value = -1;
  std::string symbol;
  bool known() const { return value >= 0; }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
};

// What an ONNX ModelProto says about itself (onnx/onnx.proto: producer_name, producer_version, domain,
// model_version, doc_string, graph.name, graph.doc_string, metadata_props) — ONNX Runtime's ModelMetadata.
struct ModelMetadata {
  std::string producer_name, producer_version, domain, description, graph_name, graph_description;
  int64_t version = 0;
  std::vector<std::pair<std::string, std::string>> custom;  // metadata_props, in model order
};

// A possibly partial shape. rank_known=false means nothing is known.
struct Shape {
  bool rank_known = false;
  std::vector<Dim> dims;

  static Shape Unknown() { return Shape{}; }
  static Shape Of(const Dims& d);
  int rank() const { return static_cast<int>(dims.size()); }
  bool fully_known() const;
  Dims concrete() const;  // requires fully_known()
  std::string ToString() const;  // "[1,3,?,N]" or "[*]" when rank is unknown
};

struct Value {
  std::string name;
  DType dtype = DType::kInvalid;
  Shape shape;
  // A tensor (dtype, shape), or a sequence / optional of tensors of `dtype` (then `shape` is the elements'
  // where known, usually unknown). Only ops whose OpDef has non_tensor_values read or make non-tensor values;
  // passes leave them alone (never folded, clustered or cast).
  ValueKind kind = ValueKind::kTensor;
  Node* producer = nullptr;   // null for inputs, constants and captures
  int producer_output = 0;    // index in producer->outputs
  // Set for constants. Immutable while it lives (its bytes are never written through another alias):
  // per-signature clones share it, and content digests are memoized per object (cache/cache_key.h).
  std::shared_ptr<const Tensor> constant;
  bool is_constant() const { return constant != nullptr; }
};

struct Attribute {
  // kType: an ONNX TypeProto (Optional's `type`): `i` holds its ValueKind, ints[0] its element DType.
  enum class Kind { kInt, kFloat, kString, kTensor, kGraph, kInts, kFloats, kStrings, kTensors, kGraphs, kType };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::shared_ptr<const Tensor> t;
  std::shared_ptr<const Graph> g;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  std::vector<std::shared_ptr<const Tensor>> tensors;
  std::vector<std::shared_ptr<const Graph>> graphs;

  // Attributes made by graph rewrites.
  static Attribute Int(int64_t v) {
    Attribute a;
    a.kind = Kind::kInt;
    a.i = v;
    return a;
  }
  static Attribute Ints(std::vector<int64_t> v) {
    Attribute a;
    a.kind = Kind::kInts;
    a.ints = std::move(v);
    return a;
  }
};

class Node {
 public:
  std::string name;
  std::string op_type;
  std::string domain;  // "" is the default ONNX domain
  int64_t opset_version = 0;  // the model's opset for this node's domain (semantics differ by opset)
  std::vector<Value*> inputs;           // nullptr = absent optional input
  std::vector<Value*> implicit_inputs;  // outer-scope values read by subgraphs
  std::vector<std::string> implicit_names;  // the capture name each one binds to in the subgraphs
  std::vector<Value*> outputs;          // nullptr = absent optional output
  std::map<std::string, Attribute> attrs;

  int num_inputs() const { return static_cast<int>(inputs.size()); }
  // Input i, or nullptr when absent or out of range.
  Value* input(int i) const { return i < num_inputs() ? inputs[i] : nullptr; }

  bool HasAttr(const std::string& name) const { return attrs.count(name) > 0; }
  int64_t GetInt(const std::string& name, int64_t dflt) const;
  float GetFloat(const std::string& name, float dflt) const;
  std::string GetString(const std::string& name, const std::string& dflt) const;
  std::vector<int64_t> GetInts(const std::string& name, std::vector<int64_t> dflt = {}) const;
  std::vector<float> GetFloats(const std::string& name, std::vector<float> dflt = {}) const;
  const Graph* GetGraph(const std::string& name) const;  // nullptr if absent
  // "node 'conv1' (Conv)" for error messages.
  std::string Describe() const;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Value* AddValue(std::string name, DType dtype = DType::kInvalid, Shape shape = Shape::Unknown());
  Value* AddConstant(std::string name, Tensor tensor);
  // Shares `tensor` (the same immutable object as another graph's constant, e.g. a cluster body's).
  Value* AddConstant(std::string name, std::shared_ptr<const Tensor> tensor);
  Value* AddInput(std::string name, DType dtype, Shape shape);
  Value* AddCapture(std::string name, DType dtype, Shape shape);
  // Adds a node; creates `num_outputs` fresh output values named "<name>:k" unless output names are given.
  Node* AddNode(std::string op_type, std::string name, std::vector<Value*> inputs,
                std::vector<std::string> output_names);
  void AddOutput(Value* v) { outputs_.push_back(v); }
  // Removes a node whose outputs have no users (checked by the verifier, not here). O(nodes): to remove
  // many, use RemoveNodes (one pass).
  void RemoveNode(Node* node);
  void RemoveNodes(const std::vector<Node*>& nodes);
  // Replaces every use of `from` (node inputs, implicit inputs, graph outputs) by `to`.
  void ReplaceAllUses(Value* from, Value* to);

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Value*>& mutable_outputs() { return outputs_; }
  const std::vector<Value*>& captures() const { return captures_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }

  // Nodes in a topological order (stable: ties keep insertion order). Error on a cycle.
  absl::StatusOr<std::vector<Node*>> TopologicalOrder() const;
  // Deep copy; subgraph attributes are shared (they are immutable).
  std::unique_ptr<Graph> Clone() const;
  // Drops the values no node, graph input, output or capture refers to (what removed nodes left behind),
  // so later Clones copy only the live graph.
  void RemoveUnusedValues();

  // The ONNX default-domain opset this graph was imported with (0 = unknown).
  int64_t opset = 0;
  std::string name;
  // The ModelProto's descriptive fields (top-level graph of an imported model; shared by clones).
  std::shared_ptr<const ModelMetadata> metadata;

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::vector<Value*> captures_;
};

}  // namespace cjit

#endif  // CJIT_COMPILER_IR_GRAPH_H_
