// The layer graph: `inputs:` and `repeat:` expansion (names, resolution rules), the errors a graph
// config can contain (each naming file:line), and a float64 central-difference check of a residual
// Net's parameter and input gradients, where activations feed several layers and their gradients
// are summed.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "framework/model/net.h"
#include "train/run_config.h"
#include "layers/registry.h"
#include "tests/support/gradcheck.h"
#include "tests/support/temp_dir.h"

using namespace qtrain;
using qtrain::testing::TempDir;

namespace {

// A config whose model.layers are `layers` (YAML lines, each starting with "    - "), starting at
// line 5 of the file.
ModelConfig model_config(TempDir& dir, const std::string& input, const std::string& layers) {
  const std::string f = dir.write("m.yaml", "data: {path: /x}\nmodel:\n  input: " + input + "\n  layers:\n" + layers +
                                                "optimizer: {type: sgd, lr: 0.1}\n");
  return parse_run_config(f, {}).model;
}

Net make_net(TempDir& dir, const std::string& input, const std::string& layers, DType dtype = DType::f32) {
  return Net(model_config(dir, input, layers), dtype, Device::cpu(), layer_registry(), loss_registry());
}

std::vector<std::string> layer_names(Net& net) {
  std::vector<std::string> names;
  for (int i = 0; i < net.num_layers(); ++i) names.push_back(net.layer(i).name());
  return names;
}

// The error message of building the net (empty when it builds).
std::string build_error(const std::string& input, const std::string& layers) {
  TempDir dir;
  try {
    make_net(dir, input, layers);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("repeat blocks expand with per-repetition names and block-local inputs", "[net][graph]") {
  TempDir dir;
  Net net = make_net(dir, "[1, 2, 2]", R"(    - {type: flatten}
    - repeat: 3
      name: stage1_block
      layers:
        - {type: dense, units: 4, name: fc}
        - {type: relu}
        - {type: add, inputs: [relu1, input]}
    - {type: add, name: both, inputs: [stage1_block2.add1, stage1_block3.add1]}
    - {type: dense, units: 2, name: head}
)");
  REQUIRE(layer_names(net) == std::vector<std::string>{"flatten1", "stage1_block1.fc", "stage1_block1.relu1",
                                                       "stage1_block1.add1", "stage1_block2.fc", "stage1_block2.relu1",
                                                       "stage1_block2.add1", "stage1_block3.fc", "stage1_block3.relu1",
                                                       "stage1_block3.add1", "both", "head"});
  // Repetition 1 reads the entry before the block; `input` inside a repetition is its own input.
  REQUIRE(net.layer_inputs(1) == std::vector<int>{0});
  REQUIRE(net.layer_inputs(3) == std::vector<int>{2, 0});
  REQUIRE(net.layer_inputs(4) == std::vector<int>{3});
  REQUIRE(net.layer_inputs(6) == std::vector<int>{5, 3});
  REQUIRE(net.layer_inputs(9) == std::vector<int>{8, 6});
  REQUIRE(net.layer_inputs(10) == std::vector<int>{6, 9});
  REQUIRE(net.layer_inputs(0) == std::vector<int>{kNetInput});
  REQUIRE(net.param_entries()[2].name == "stage1_block2.fc.weight");
  REQUIRE(net.summary().find("both") != std::string::npos);
  REQUIRE(net.summary().find("<- stage1_block2.add1, stage1_block3.add1") != std::string::npos);
}

TEST_CASE("inputs resolve in the enclosing scopes, and blocks nest", "[net][graph]") {
  TempDir dir;
  Net net = make_net(dir, "[3]", R"(    - {type: dense, units: 3, name: stem}
    - repeat: 2
      name: outer
      layers:
        - repeat: 2
          name: inner
          layers:
            - {type: tanh}
            - {type: add, inputs: [tanh1, stem]}
    - {type: dense, units: 2, inputs: [outer2.inner2.add1]}
)");
  REQUIRE(layer_names(net) == std::vector<std::string>{"stem", "outer1.inner1.tanh1", "outer1.inner1.add1",
                                                       "outer1.inner2.tanh1", "outer1.inner2.add1",
                                                       "outer2.inner1.tanh1", "outer2.inner1.add1",
                                                       "outer2.inner2.tanh1", "outer2.inner2.add1", "dense1"});
  REQUIRE(net.layer_inputs(2) == std::vector<int>{1, 0});  // `stem` found at the top level
  REQUIRE(net.layer_inputs(3) == std::vector<int>{2});     // inner2 reads inner1's output
  REQUIRE(net.layer_inputs(5) == std::vector<int>{4});     // outer2 reads outer1's output
}

TEST_CASE("nested repeat counts that multiply beyond 65536 layers are an error", "[net][graph]") {
  // 100 x 1000 relus: refused before the expansion is built (a million layers take 24 s to build and
  // run out of memory in training).
  const std::string e = build_error("[4]", R"(    - {type: dense, units: 4}
    - name: outer
      repeat: 100
      layers:
        - name: inner
          repeat: 1000
          layers:
            - {type: relu}
)");
  REQUIRE_THAT(e, Catch::Contains("m.yaml:12:") && Catch::Contains("model.layers.1.layers.0.layers.0") &&
                      Catch::Contains("would be layer 65537 of the expanded model, more than the 65536 allowed"));
}

TEST_CASE("graph config errors name the file, line and the problem", "[net][graph]") {
  // Lines: 5 is the first layer.
  std::string e = build_error("[4]", R"(    - {type: dense, units: 4, name: a}
    - {type: add, inputs: [a, nope]}
    - {type: dense, units: 2}
)");
  REQUIRE_THAT(e, Catch::Contains("m.yaml:6:") && Catch::Contains("'nope', which is no earlier layer") &&
                      Catch::Contains("model.layers.1.inputs"));

  e = build_error("[4]", R"(    - {type: dense, units: 4, name: a}
    - {type: add, inputs: [a, later]}
    - {type: dense, units: 4, name: later}
    - {type: dense, units: 2}
)");
  REQUIRE_THAT(e, Catch::Contains("m.yaml:6:") && Catch::Contains("'later', which comes later"));

  e = build_error("[4]", R"(    - {type: dense, units: 4, name: a}
    - {type: dense, units: 5, name: b, inputs: input}
    - {type: add, inputs: [a, b]}
    - {type: dense, units: 2}
)");
  REQUIRE_THAT(e, Catch::Contains("m.yaml:7:") && Catch::Contains("input 1 is [4] and input 2 is [5]"));

  e = build_error("[4]", R"(    - {type: dense, units: 4, name: a}
    - {type: dense, units: 2, inputs: input}
)");
  REQUIRE_THAT(e, Catch::Contains("m.yaml:5:") && Catch::Contains("'a'): its output is never used"));

  e = build_error("[4]", R"(    - {type: dense, units: 4, name: a}
    - {type: relu, inputs: [a, input]}
    - {type: dense, units: 2}
)");
  REQUIRE_THAT(e, Catch::Contains("m.yaml:6:") && Catch::Contains("takes 1 input(s), got 2"));

  e = build_error("[4]", R"(    - {type: dense, units: 4, name: a}
    - {type: add, inputs: a}
    - {type: dense, units: 2}
)");
  REQUIRE_THAT(e, Catch::Contains("m.yaml:6:") && Catch::Contains("takes two or more inputs, got 1"));

  e = build_error("[4]", R"(    - {type: dense, units: 4, name: a}
    - {type: dense, units: 4, name: a}
    - {type: dense, units: 2}
)");
  REQUIRE_THAT(e, Catch::Contains("m.yaml:6:") && Catch::Contains("duplicate layer name 'a'"));

  e = build_error("[4]", R"(    - {type: dense, units: 4, name: a.b}
    - {type: dense, units: 2}
)");
  REQUIRE_THAT(e, Catch::Contains("m.yaml:5:") && Catch::Contains("not a valid layer name"));

  // Inside a block: the inner entry's own line, with the repetition's full name.
  e = build_error("[4]", R"(    - {type: dense, units: 4}
    - repeat: 2
      name: blk
      layers:
        - {type: tanh}
        - {type: add, inputs: [tanh1, missing]}
    - {type: dense, units: 2}
)");
  REQUIRE_THAT(e, Catch::Contains("m.yaml:10:") && Catch::Contains("of layer 'blk1.add1' names 'missing'"));

  e = build_error("[4]", R"(    - {repeat: 2, name: blk, type: dense, layers: [{type: tanh}]}
    - {type: dense, units: 2}
)");
  REQUIRE_THAT(e, Catch::Contains("m.yaml:5:") && Catch::Contains("type"));

  e = build_error("[4]", R"(    - {repeat: 0, name: blk, layers: [{type: tanh}]}
    - {type: dense, units: 2}
)");
  REQUIRE_THAT(e, Catch::Contains("repeat must be >= 1"));

  e = build_error("[4]", R"(    - {repeat: 2, layers: [{type: tanh}]}
    - {type: dense, units: 2}
)");
  REQUIRE_THAT(e, Catch::Contains("name is required for a repeat block"));
}

TEST_CASE("a residual net's parameter and input gradients match central differences (f64)", "[net][graph][gradcheck]") {
  TempDir dir;
  // The net input feeds two layers, d1 feeds two, each repetition's input feeds two: every kind of
  // gradient sum, plus batch norm (training mode) and nested names.
  Net net = make_net(dir, "[4]", R"(    - {type: dense, units: 6, name: d1}
    - {type: tanh, name: t1}
    - {type: dense, units: 6, name: d2}
    - {type: dense, units: 6, name: skip, inputs: input}
    - {type: add, name: sum, inputs: [d2, d1, skip]}
    - {type: batchnorm1d, name: bn}
    - {type: tanh}
    - repeat: 2
      name: block
      layers:
        - {type: dense, units: 6, name: fc}
        - {type: tanh, name: act}
        - {type: add, name: join, inputs: [act, input]}
    - {type: dense, units: 3, name: head}
)",
                     DType::f64);
  net.init_parameters(7);
  net.set_input_gradient(true);
  Context ctx = Context::cpu(1, 1);
  const int64_t batch = 5;
  Tensor x = qtrain::testing::random_tensor({batch, 4}, 99, -1.5, 1.5);
  Tensor labels = Tensor::empty({batch}, DType::i32);
  for (int i = 0; i < batch; ++i) labels.data<int32_t>()[i] = (i * 2) % 3;

  std::vector<int> forward_done;
  net.forward(ctx, x, /*training=*/true, [&](int i) { forward_done.push_back(i); });
  std::vector<int> in_order;
  for (int i = 0; i < net.num_layers(); ++i) in_order.push_back(i);
  REQUIRE(forward_done == in_order);  // forward's hook: config order, once per layer
  net.loss(ctx, labels, /*with_gradient=*/true);
  net.grads().fill_(std::nan(""));
  std::vector<int> done;
  net.backward(ctx, [&](int i) { done.push_back(i); });
  std::vector<int> reverse;
  for (int i = net.num_layers() - 1; i >= 0; --i) reverse.push_back(i);
  REQUIRE(done == reverse);  // on_layer_done in reverse config order, once per layer
  const Tensor grads = net.grads().clone();
  const Tensor dx = net.input_gradient().clone();

  auto objective = [&]() {
    net.forward(ctx, x, true);
    return net.loss(ctx, labels, false).loss_sum / static_cast<double>(batch);
  };
  auto numeric = [&](double* v) {
    const double saved = *v, h = 1e-5;
    *v = saved + h;
    const double plus = objective();
    *v = saved - h;
    const double minus = objective();
    *v = saved;
    return (plus - minus) / (2 * h);
  };
  auto check = [](const std::string& what, double analytic, double num) {
    const double err = std::fabs(analytic - num) / std::max({std::fabs(analytic), std::fabs(num), 1.0});
    INFO(what << ": analytic " << analytic << " numeric " << num);
    REQUIRE(err < 1e-7);
  };
  int64_t checked = 0;
  for (const ParamEntry& e : net.param_entries())
    for (int64_t i = 0; i < e.numel; ++i, ++checked)
      check(e.name + "[" + std::to_string(i) + "]", grads.data<double>()[e.offset + i],
            numeric(net.params().data<double>() + e.offset + i));
  for (int64_t i = 0; i < x.numel(); ++i, ++checked)
    check("input[" + std::to_string(i) + "]", dx.data<double>()[i], numeric(x.data<double>() + i));
  REQUIRE(checked == net.num_parameters() + x.numel());
}

TEST_CASE("buffers live in their own arena, named like parameters", "[net][graph]") {
  TempDir dir;
  Net net = make_net(dir, "[3, 2, 2]", R"(    - {type: batchnorm2d, name: bn1}
    - {type: flatten}
    - {type: dense, units: 2}
)");
  net.init_parameters(1);
  const auto& b = net.buffer_entries();
  REQUIRE(b.size() == 2);
  REQUIRE(b[0].name == "bn1.running_mean");
  REQUIRE(b[1].name == "bn1.running_var");
  REQUIRE(b[0].shape == Shape{3});
  for (int i = 0; i < 3; ++i) {
    REQUIRE(net.buffers().data<float>()[b[0].offset + i] == 0.0f);
    REQUIRE(net.buffers().data<float>()[b[1].offset + i] == 1.0f);
  }
  // Not parameters: the optimizer and the exchange never see them.
  for (const ParamEntry& e : net.param_entries()) REQUIRE(e.name.find("running") == std::string::npos);
  REQUIRE(net.num_parameters() == 3 + 3 + 12 * 2 + 2);
  REQUIRE(net.layer(0).buffers()[1].data<float>() == net.buffers().data<float>() + b[1].offset);
}

TEST_CASE("configs/cifar_resnet110.yaml expands to ResNet-110", "[net][graph]") {
  // Only the graph is checked here (names, wiring, layer counts): conv2d, global_avgpool and the
  // cifar10 reader are built elsewhere, so the full Net is not constructed.
  LoadedConfig loaded = load_config_file(std::string(QTRAIN_SOURCE_DIR) + "/configs/cifar_resnet110.yaml", {});
  ConfigNode model(loaded.root["model"], "model", loaded.source);
  const std::vector<GraphNode> nodes = expand_layer_graph(model.items("layers"));
  std::map<std::string, int> types;
  std::map<std::string, int> index;
  for (size_t i = 0; i < nodes.size(); ++i) {
    ++types[nodes[i].type];
    index[nodes[i].name] = static_cast<int>(i);
  }
  REQUIRE(types["conv2d"] + types["dense"] == 110);  // the "110" of ResNet-110: layers with weights
  REQUIRE(types["conv2d"] == 1 + 3 * 18 * 2);
  REQUIRE(types["add"] == 54);
  REQUIRE(types["batchnorm2d"] == 109);
  REQUIRE(types["pad_channels"] == 2);
  // Identity shortcuts read the block's input, i.e. the previous block's output.
  // The blocks' relus are fused into batch norm and add (`activation: relu`); the stem keeps its relu
  // layer, so that the stages stay at the indices users --set (model.layers.3, 5, 7: docs/results.md).
  REQUIRE(types["relu"] == 1);
  const GraphNode& sum = nodes[static_cast<size_t>(index.at("stage1_block5.out"))];
  REQUIRE(sum.type == "add");
  REQUIRE(sum.inputs == std::vector<int>{index.at("stage1_block5.bn2"), index.at("stage1_block4.out")});
  REQUIRE(nodes[static_cast<size_t>(index.at("stage1_block1.conv1"))].inputs == std::vector<int>{index.at("relu1")});
  // The downsampling block's shortcut pads the previous stage's output; the next block reads its output.
  REQUIRE(nodes[static_cast<size_t>(index.at("stage2_first1.shortcut"))].inputs ==
          std::vector<int>{index.at("stage1_block18.out")});
  REQUIRE(nodes[static_cast<size_t>(index.at("stage2_block1.conv1"))].inputs ==
          std::vector<int>{index.at("stage2_first1.out")});
  REQUIRE(nodes[static_cast<size_t>(index.at("global_avgpool1"))].inputs ==
          std::vector<int>{index.at("stage3_block17.out")});
  REQUIRE(nodes.back().name == "fc");

  // docs/results.md's ResNet-14: the stages' repeats by index.
  LoadedConfig small =
      load_config_file(std::string(QTRAIN_SOURCE_DIR) + "/configs/cifar_resnet110.yaml",
                       {"model.layers.3.repeat=2", "model.layers.5.repeat=1", "model.layers.7.repeat=1"});
  ConfigNode small_model(small.root["model"], "model", small.source);
  int weighted = 0;
  for (const GraphNode& node : expand_layer_graph(small_model.items("layers")))
    weighted += node.type == "conv2d" || node.type == "dense";
  REQUIRE(weighted == 14);
}
