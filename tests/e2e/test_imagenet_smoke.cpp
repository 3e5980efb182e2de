// Smoke test of the shipped ImageNet configs (not an ImageNet result: ImageNet is not available here).
// The test writes a tiny JPEG tree in ImageNet's layout (3 classes of solid-colour images, which the
// readers resize and crop to 224x224) and runs two training steps and an evaluation of AlexNet and
// ResNet-50 exactly as configured, apart from the data path, the batch sizes and the number of
// classes. What it shows: the
// configs build, the imagefolder reader, the augmentation and every layer type the two networks use
// run forward and backward at ImageNet resolution, and the loss is finite.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "train/trainer.h"
#include "tests/support/image_files.h"
#include "tests/support/temp_dir.h"

using namespace qtrain;
using qtrain::testing::TempDir;

namespace {

void write_tree(const TempDir& dir) {
  const uint8_t colours[3][3] = {{200, 30, 30}, {30, 200, 30}, {30, 30, 200}};
  for (const char* split : {"train", "val"}) {
    for (int c = 0; c < 3; ++c) {
      const std::string folder = dir.file(std::string("imagenet/") + split + "/n0000000" + std::to_string(c));
      std::filesystem::create_directories(folder);
      for (int i = 0; i < (std::string(split) == "train" ? 2 : 1); ++i) {
        // Not square and not 224: the transforms must resize and crop.
        const auto pixels = qtrain::testing::solid_rgb(96 + 16 * i, 80, colours[c][0], colours[c][1],
                                                       static_cast<uint8_t>(colours[c][2] - 10 * i));
        qtrain::testing::write_file(folder + "/img" + std::to_string(i) + ".JPEG",
                                    qtrain::testing::encode_jpeg(pixels, 96 + 16 * i, 80, 3));
      }
    }
  }
}

}  // namespace

TEST_CASE("the ImageNet configs train two steps on a generated JPEG tree (smoke test)", "[e2e][imagenet]") {
  TempDir dir;
  write_tree(dir);
  // The generated tree has 3 classes, so the last dense layer gets 3 units instead of 1000.
  const std::pair<const char*, const char*> configs[] = {{"imagenet_alexnet.yaml", "model.layers.22.units=3"},
                                                         {"imagenet_resnet50.yaml", "model.layers.13.units=3"}};
  for (const auto& [config, classes] : configs) {
    INFO(config);
    RunConfig rc = parse_run_config(std::string(QTRAIN_SOURCE_DIR) + "/configs/" + config,
                                    {"data.path=" + dir.file("imagenet"), "data.batch_size=2", "data.eval_batch_size=3",
                                     "data.workers=2", classes, "train.max_steps=2", "train.threads=2", "device=cpu",
                                     "output.progress=none", "output.dir=" + dir.file(std::string("run-") + config)});
    Trainer trainer(std::move(rc), TrainOptions{});
    const TrainSummary s = trainer.run();
    CHECK(s.steps == 2);
    CHECK(s.test.samples == 3);
    CHECK(std::isfinite(s.test.loss));
    CHECK(std::filesystem::exists(dir.file(std::string("run-") + config + "/checkpoint.safetensors")));
  }
}
