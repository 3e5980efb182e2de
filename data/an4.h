// The CMU AN4 corpus (alphanumeric speech): etc/an4_{train,test}.fileids list utterances as paths under
// wav/ without extension, etc/an4_{train,test}.transcription hold "<s> WORDS </s> (utterance-id)" lines
// in the same order. Audio is read as <id>.raw (headerless 16 kHz 16-bit PCM, byte order configurable,
// big-endian in CMU's release), <id>.sph or <id>.wav, whichever exists; samples are normalized log-mel
// frames (audio_features.h), targets the characters of the transcription.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/audio_features.h"
#include "data/dataset.h"

namespace qtrain {

struct An4Options {
  AudioOptions audio;
  FilterbankOptions features;
  // Folder of the feature cache (an4_<split>.features), created if needed; empty: no cache.
  std::string cache_dir;
  int64_t limit = 0;  // keep only the first N utterances (0 = all)
  // Frames stacked into one step: `stack` consecutive frames concatenated (stack * num_mels values, a
  // hop of stack * hop_ms); the last (frames mod stack) frames are dropped. Fewer, wider steps make
  // the LSTM cheaper per utterance and shorten the paths CTC must learn (low-frame-rate acoustic
  // models); the feature cache holds unstacked frames, so any stack reuses it.
  int64_t stack = 1;
};

// The character vocabulary: "" (the CTC blank) at 0, then every character of the training
// transcriptions (words spelled out: SIX is S, I, X; a space separates words) in byte order.
std::vector<std::string> an4_vocabulary(const std::string& folder);

// Opens one split, computing (or loading from the cache) the features of every utterance.
// InputErrors name the file and line: a missing etc/ file, fileids and transcriptions that differ
// in count or utterance id, an empty transcription, a character not in the training vocabulary,
// missing or unreadable audio, audio shorter than one analysis window (or than `stack` frames).
std::unique_ptr<Dataset> open_an4(const std::string& folder, Split split, const An4Options& options);

}  // namespace qtrain
