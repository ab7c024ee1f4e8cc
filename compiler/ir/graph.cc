#include "compiler/ir/graph.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cjit {

Shape Shape::Of(const Dims& d) {
  Shape s;
  s.rank_known = true;
  for (int64_t x : d) s.dims.push_back(Dim{x, ""});
  return s;
}

bool Shape::fully_known() const {
  if (!rank_known) return false;
  for (const Dim& d : dims) {
    if (!d.known()) return false;
  }
  return true;
}

Dims Shape::concrete() const {
  Dims out;
  for (const Dim& d : dims) out.push_back(d.value);
  return out;
}

std::string Shape::ToString() const {
  if (!rank_known) return "[*]";
  std::vector<std::string> parts;
  for (const Dim& d : dims) {
    parts.push_back(d.known() ? absl::StrCat(d.value) : (d.symbol.empty() ? "?" : d.symbol));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

int64_t Node::GetInt(const std::string& n, int64_t dflt) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? dflt : it->second.i;
}
float Node::GetFloat(const std::string& n, float dflt) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? dflt : it->second.f;
}
std::string Node::GetString(const std::string& n, const std::string& dflt) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? dflt : it->second.s;
}
std::vector<int64_t> Node::GetInts(const std::string& n, std::vector<int64_t> dflt) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? dflt : it->second.ints;
}
std::vector<float> Node::GetFloats(const std::string& n, std::vector<float> dflt) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? dflt : it->second.floats;
}
const Graph* Node::GetGraph(const std::string& n) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? nullptr : it->second.g.get();
}
std::string Node::Describe() const {
  return absl::StrCat("node '", name, "' (", domain.empty() ? "" : domain + ".", op_type, ")");
}

Value* Graph::AddValue(std::string name, DType dtype, Shape shape) {
  auto v = std::make_unique<Value>();
  v->name = std::move(name);
  v->dtype = dtype;
  v->shape = std::move(shape);
  values_.push_back(std::move(v));
  return values_.back().get();
}

Value* Graph::AddConstant(std::string name, Tensor tensor) {
  Value* v = AddValue(std::move(name), tensor.dtype(), Shape::Of(tensor.dims()));
  v->constant = std::make_shared<const Tensor>(std::move(tensor));
  return v;
}

Value* Graph::AddConstant(std::string name, std::shared_ptr<const Tensor> tensor) {
  Value* v = AddValue(std::move(name), tensor->dtype(), Shape::Of(tensor->dims()));
  v->constant = std::move(tensor);
  return v;
}

Value* Graph::AddInput(std::string name, DType dtype, Shape shape) {
  Value* v = AddValue(std::move(name), dtype, std::move(shape));
  inputs_.push_back(v);
  return v;
}

Value* Graph::AddCapture(std::string name, DType dtype, Shape shape) {
  Value* v = AddValue(std::move(name), dtype, std::move(shape));
  captures_.push_back(v);
  return v;
}

Node* Graph::AddNode(std::string op_type, std::string name, std::vector<Value*> inputs,
                     std::vector<std::string> output_names) {
  auto n = std::make_unique<Node>();
  n->op_type = std::move(op_type);
  n->name = std::move(name);
  n->inputs = std::move(inputs);
  for (size_t k = 0; k < output_names.size(); ++k) {
    if (output_names[k].empty()) {
      n->outputs.push_back(nullptr);
      continue;
    }
    Value* v = AddValue(output_names[k]);
    v->producer = n.get();
    v->producer_output = static_cast<int>(k);
    n->outputs.push_back(v);
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

void Graph::RemoveUnusedValues() {
  std::unordered_set<const Value*> used(inputs_.begin(), inputs_.end());
  used.insert(outputs_.begin(), outputs_.end());
  used.insert(captures_.begin(), captures_.end());
  for (const auto& n : nodes_) {
    for (const auto* list : {&n->inputs, &n->implicit_inputs, &n->outputs}) used.insert(list->begin(), list->end());
  }
  values_.erase(std::remove_if(values_.begin(), values_.end(),
                               [&](const std::unique_ptr<Value>& v) { return used.count(v.get()) == 0; }),
                values_.end());
}

void Graph::RemoveNode(Node* node) {
  for (Value* v : node->outputs) {
    if (v && v->producer == node) v->producer = nullptr;
  }
  nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(),
                              [&](const std::unique_ptr<Node>& n) { return n.get() == node; }),
               nodes_.end());
}

void Graph::RemoveNodes(const std::vector<Node*>& nodes) {
  if (nodes.empty()) return;
  std::unordered_set<const Node*> gone(nodes.begin(), nodes.end());
  for (Node* node : nodes) {
    for (Value* v : node->outputs) {
      if (v && v->producer == node) v->producer = nullptr;
    }
  }
  nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(),
                              [&](const std::unique_ptr<Node>& n) { return gone.count(n.get()) > 0; }),
               nodes_.end());
}

void Graph::ReplaceAllUses(Value* from, Value* to) {
  for (auto& n : nodes_) {
    for (Value*& v : n->inputs) if (v == from) v = to;
    for (Value*& v : n->implicit_inputs) if (v == from) v = to;
  }
  for (Value*& v : outputs_) if (v == from) v = to;
}

absl::StatusOr<std::vector<Node*>> Graph::TopologicalOrder() const {
  // Kahn's algorithm, smallest node index first among the ready ones (a deterministic order that keeps the
  // original order where the graph allows). Users in one flat array (CSR): the passes of a specialization
  // call this dozens of times, and a vector per node made allocation its main cost.
  const int n = static_cast<int>(nodes_.size());
  absl::flat_hash_map<const Node*, int> index;
  index.reserve(nodes_.size());
  for (int i = 0; i < n; ++i) index.emplace(nodes_[i].get(), i);
  std::vector<int> pending(n, 0), first(n + 1, 0);
  std::vector<std::pair<int, int>> edges;  // (producer, user)
  edges.reserve(nodes_.size() * 2);
  for (int i = 0; i < n; ++i) {
    auto add = [&](const Value* v) {
      if (v == nullptr || v->producer == nullptr) return;
      auto it = index.find(v->producer);
      if (it == index.end()) return;
      ++pending[i];
      ++first[it->second + 1];
      edges.emplace_back(it->second, i);
    };
    for (const Value* v : nodes_[i]->inputs) add(v);
    for (const Value* v : nodes_[i]->implicit_inputs) add(v);
  }
  for (int i = 0; i < n; ++i) first[i + 1] += first[i];
  std::vector<int> users(edges.size()), fill(first.begin(), first.end() - 1);
  for (const auto& [p, u] : edges) users[fill[p]++] = u;  // each producer's users in increasing order
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) if (pending[i] == 0) ready.push(i);
  std::vector<Node*> order;
  order.reserve(nodes_.size());
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(nodes_[i].get());
    for (int e = first[i]; e < first[i + 1]; ++e) {
      if (--pending[users[e]] == 0) ready.push(users[e]);
    }
  }
  if (order.size() != nodes_.size()) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (pending[i] > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph '", name, "' has a cycle through ", nodes_[i]->Describe()));
      }
    }
  }
  return order;
}

std::unique_ptr<Graph> Graph::Clone() const {
  auto g = std::make_unique<Graph>();
  g->opset = opset;
  g->name = name;
  g->metadata = metadata;
  // Cloned per new input signature (specialization replay): one flat map, sizes reserved.
  absl::flat_hash_map<const Value*, Value*> vmap;
  vmap.reserve(values_.size());
  g->values_.reserve(values_.size());
  g->nodes_.reserve(nodes_.size());
  for (const auto& v : values_) {
    Value* c = g->AddValue(v->name, v->dtype, v->shape);
    c->constant = v->constant;
    c->kind = v->kind;
    c->producer_output = v->producer_output;
    vmap[v.get()] = c;
  }
  auto mapv = [&](Value* v) -> Value* { return v ? vmap.at(v) : nullptr; };
  for (const auto& n : nodes_) {
    auto c = std::make_unique<Node>();
    c->name = n->name;
    c->op_type = n->op_type;
    c->domain = n->domain;
    c->opset_version = n->opset_version;
    c->attrs = n->attrs;
    c->inputs.reserve(n->inputs.size());
    c->outputs.reserve(n->outputs.size());
    for (Value* v : n->inputs) c->inputs.push_back(mapv(v));
    for (Value* v : n->implicit_inputs) c->implicit_inputs.push_back(mapv(v));
    c->implicit_names = n->implicit_names;
    for (Value* v : n->outputs) {
      Value* o = mapv(v);
      if (o) o->producer = c.get();
      c->outputs.push_back(o);
    }
    g->nodes_.push_back(std::move(c));
  }
  for (Value* v : inputs_) g->inputs_.push_back(mapv(v));
  for (Value* v : outputs_) g->outputs_.push_back(mapv(v));
  for (Value* v : captures_) g->captures_.push_back(mapv(v));
  return g;
}

}  // namespace cjit
