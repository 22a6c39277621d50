// Tokenizer tests: exact byte round trips, training against a naive BPE reference, determinism,
// the file formats (ours and llm.c's), and clear errors for bad files and options.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "kernels/common.h"

namespace {

// A fresh directory under /tmp for one test, removed with everything in it afterwards.
struct TokTempDir {
  std::string path;
  TokTempDir() {
    char tmpl[] = "/tmp/flashgpt_test_tok_XXXXXX";
    char* p = mkdtemp(tmpl);
    EXPECT_NE(p, nullptr);
    path = p ? p : "/tmp";
  }
  ~TokTempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

const char* kEnglish =
    "The quick brown fox jumps over the lazy dog. The dog was not amused, and the fox ran off "
    "into the forest, where the other foxes were waiting for their dinner.\n"
    "It is a truth universally acknowledged that a programmer in possession of a good compiler "
    "must be in want of a faster computer. However little known the feelings or views of such a "
    "programmer may be on his first entering a project, this truth is so well fixed in the minds "
    "of the surrounding managers that he is considered the rightful property of some one or other "
    "of their deadlines.\n"
    "In 1969, the first message was sent over the network between two computers; the system "
    "crashed after the first two letters. Today there are more than 5000000000 people online, "
    "and the network still crashes, but only on Mondays and on the days before holidays.\n"
    "She sells sea shells by the sea shore. The shells she sells are surely sea shells. So if "
    "she sells shells on the sea shore, I'm sure she sells sea shore shells.\n"
    "  Indented lines,\ttabs, and    runs of spaces\n\n\nare whitespace that the tokenizer keeps.\n"
    "Naïve café owners in São Paulo serve crème brûlée — and ümlauts — to the jury.\n";

std::string english_corpus() {
  std::string s;
  for (int i = 0; i < 4; i++) s += kEnglish;
  return s;
}

template <typename F>
void expect_error_containing(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected flashgpt::Error containing '" << needle << "'";
  } catch (const flashgpt::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
  }
}

void write_bytes(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), (std::streamsize)data.size());
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// ---- naive reference BPE: recounts every pair from scratch at every merge
// Pre-split rules written out independently (see tokenizer.h).
int ref_class(unsigned char c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return 0;
  if (isalpha(c) || c >= 0x80) return 1;
  if (isdigit(c)) return 2;
  return 3;
}
std::vector<std::string> ref_split(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i;
    if (ref_class(s[i]) == 0) {
      size_t j = i;
      while (j < s.size() && ref_class(s[j]) == 0) j++;
      if (j < s.size() && s[j - 1] == ' ') j--;  // the last space goes to the next word
      if (j == i) {                              // a lone ' ' before a word: " word"
        j = i + 1;
        int c = ref_class(s[j]);
        while (j < s.size() && ref_class(s[j]) == c) j++;
      }
      i = j;
    } else {
      int c = ref_class(s[i]);
      while (i < s.size() && ref_class(s[i]) == c) i++;
    }
    for (size_t p = start; p < i; p += 256) out.push_back(s.substr(p, std::min<size_t>(256, i - p)));
  }
  return out;
}

struct RefBpe {
  std::vector<std::pair<int, int>> merges;
  std::map<std::string, std::vector<int>> final_ids;  // chunk -> ids after all merges
};
RefBpe ref_train(const std::string& text, int V) {
  std::map<std::string, int64_t> counts;
  for (const std::string& c : ref_split(text)) counts[c]++;
  std::vector<std::string> keys;
  std::vector<std::vector<int>> ids;
  for (auto& kv : counts) {
    keys.push_back(kv.first);
    ids.emplace_back(kv.first.begin(), kv.first.end());
    for (int& x : ids.back()) x &= 0xff;
  }
  RefBpe r;
  for (int m = 0; m < V - 257; m++) {
    std::map<std::pair<int, int>, int64_t> pc;
    for (size_t c = 0; c < ids.size(); c++)
      for (size_t i = 0; i + 1 < ids[c].size(); i++) pc[{ids[c][i], ids[c][i + 1]}] += counts[keys[c]];
    std::pair<int, int> best{-1, -1};
    int64_t bc = 0;
    for (auto& kv : pc)
      if (kv.second > bc) bc = kv.second, best = kv.first;  // map order: smallest pair wins ties
    if (bc == 0) break;
    r.merges.push_back(best);
    for (auto& v : ids) {
      std::vector<int> w;
      for (size_t i = 0; i < v.size(); i++) {
        if (i + 1 < v.size() && v[i] == best.first && v[i + 1] == best.second) {
          w.push_back(256 + m);
          i++;
        } else {
          w.push_back(v[i]);
        }
      }
      v = w;
    }
  }
  for (size_t c = 0; c < keys.size(); c++) r.final_ids[keys[c]] = ids[c];
  return r;
}

std::vector<std::pair<int, int>> merges_from_file(const std::string& path) {
  std::string d = read_bytes(path);
  std::vector<std::pair<int, int>> m;
  const int32_t* h = (const int32_t*)d.data();
  for (int r = 0; r < h[4]; r++) m.push_back({h[256 + 2 * r], h[256 + 2 * r + 1]});
  return m;
}

}  // namespace

TEST(Tokenizer, RoundTripsArbitraryBytes) {
  Tokenizer tok = Tokenizer::train(english_corpus(), 400);
  Tokenizer bytes_only = Tokenizer::train(english_corpus(), 257);
  std::mt19937 rng(123);
  std::vector<std::string> cases = {
      "", "a", " ", "\n", std::string(1, '\0'), std::string(5000, 'a'), std::string(1000, ' '),
      std::string(700, '\0'), std::string(3000, '-'), std::string(600, '7'),
      "\xff\xfe\x80\xc3(\xe2\x82 invalid \xed\xa0\x80 utf-8 \xf0\x28\x8c\xbc",
      "Naïve café — ümlauts\r\n\tend  ", "<|endoftext|>", kEnglish};
  for (int i = 0; i < 200; i++) {
    std::string s(rng() % 2000, '\0');
    int mode = i % 4;
    for (char& c : s) {
      if (mode == 0) c = (char)(rng() & 0xff);                       // any byte
      else if (mode == 1) c = " \n\tabcdeTH0129.,'\0\x80\xc3"[rng() % 18];  // text-like mix
      else if (mode == 2) c = (char)(rng() % 4 ? 'x' : ' ');          // long runs
      else c = kEnglish[rng() % 300];
    }
    cases.push_back(s);
  }
  for (const std::string& s : cases) {
    std::vector<int> ids = tok.encode(s);
    for (int id : ids) ASSERT_TRUE(id >= 0 && id < tok.eot_token());
    ASSERT_EQ(tok.decode(ids), s);
    std::vector<int> b = bytes_only.encode(s);
    ASSERT_EQ(b.size(), s.size());
    ASSERT_EQ(bytes_only.decode(b), s);
  }
}

// The incremental trainer must learn exactly the merges of the from-scratch recount, and
// encode() must reproduce what training did to each chunk.
void check_against_reference(const std::string& text, int V) {
  RefBpe ref = ref_train(text, V);
  ASSERT_EQ((int)ref.merges.size(), V - 257);
  Tokenizer tok = Tokenizer::train(text, V);
  TokTempDir dir;
  tok.save(dir.file("tok.bin"));
  std::vector<std::pair<int, int>> got = merges_from_file(dir.file("tok.bin"));
  ASSERT_EQ(got.size(), ref.merges.size());
  for (size_t r = 0; r < got.size(); r++) {
    EXPECT_EQ(got[r], ref.merges[r]) << "merge " << r;
    EXPECT_EQ(tok.decode_token(256 + (int)r),
              tok.decode_token(got[r].first) + tok.decode_token(got[r].second));
  }
  std::vector<int> want;
  for (const std::string& c : ref_split(text)) {
    const std::vector<int>& v = ref.final_ids.at(c);
    want.insert(want.end(), v.begin(), v.end());
  }
  EXPECT_EQ(tok.encode(text), want);
}

std::string random_words(uint32_t seed, size_t bytes, const char* alphabet, int max_len) {
  std::mt19937 rng(seed);
  std::string text, a = alphabet;
  while (text.size() < bytes) {
    text += rng() % 10 ? " " : ".\n";
    int len = 1 + rng() % max_len;
    for (int i = 0; i < len; i++) text += a[rng() % a.size()];
  }
  return text;
}

TEST(Tokenizer, TrainingMatchesNaiveReference) {
  check_against_reference(english_corpus(), 500);
  check_against_reference(random_words(1, 8000, "abcdefgh", 7), 450);  // many ties
  // Runs of one or two letters: overlapping pairs (a,a) and repeats (a,b,a,b) in one chunk.
  check_against_reference(random_words(2, 6000, "ab", 24), 400);
  check_against_reference(random_words(3, 3000, "a", 40) + std::string(700, 'a'), 270);
}

TEST(Tokenizer, MergesStayInsideChunks) {
  Tokenizer tok = Tokenizer::train(english_corpus(), 600);
  for (int id = 256; id < tok.eot_token(); id++) {
    std::string b = tok.decode_token(id);
    EXPECT_EQ(ref_split(b).size(), 1u) << "token " << id << " '" << b << "' spans chunks";
  }
}

TEST(Tokenizer, TrainingIsDeterministic) {
  // Random words over a small alphabet: many pairs with equal counts, so ties are exercised.
  std::string text = random_words(7, 60000, "abcdefgh", 7);
  Tokenizer a = Tokenizer::train(text, 1500);
  Tokenizer b = Tokenizer::train(text, 1500);
  ASSERT_EQ(a.vocab_size(), 1500);
  for (int id = 0; id < a.vocab_size(); id++) ASSERT_EQ(a.decode_token(id), b.decode_token(id));
  EXPECT_EQ(a.encode(text), b.encode(text));
  TokTempDir dir;
  a.save(dir.file("a.bin"));
  b.save(dir.file("b.bin"));
  EXPECT_EQ(read_bytes(dir.file("a.bin")), read_bytes(dir.file("b.bin")));
}

TEST(Tokenizer, SaveLoadRoundTrip) {
  std::string text = english_corpus();
  int progress_calls = 0, last_done = -1;
  Tokenizer tok = Tokenizer::train(text, 512, [&](int done, int total) {
    progress_calls++;
    EXPECT_EQ(total, 512 - 257);
    EXPECT_GT(done, last_done);
    last_done = done;
  });
  EXPECT_GT(progress_calls, 0);
  EXPECT_EQ(last_done, 512 - 257);
  TokTempDir dir;
  const std::string path = dir.file("tokenizer.bin");
  tok.save(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 8u * (512 - 257));
  Tokenizer back = Tokenizer::load(path);
  ASSERT_EQ(back.vocab_size(), 512);
  EXPECT_EQ(back.eot_token(), 511);
  EXPECT_TRUE(back.can_encode());
  for (int id = 0; id < 512; id++) ASSERT_EQ(back.decode_token(id), tok.decode_token(id));
  EXPECT_EQ(back.encode(text), tok.encode(text));
  std::string other = "Some text the tokenizer never saw: 42 zebras!\x01\xff";
  EXPECT_EQ(back.encode(other), tok.encode(other));
}

TEST(Tokenizer, CompressesEnglish) {
  std::string text = english_corpus();
  Tokenizer tok = Tokenizer::train(text, 600);
  size_t n = tok.encode(text).size();
  EXPECT_LT(n * 2, text.size()) << n << " tokens for " << text.size() << " bytes";
  std::string unseen = "The programmer sent the fox a message about the network and the shells.";
  EXPECT_LT(tok.encode(unseen).size() * 3, unseen.size() * 2);  // < 2/3 token per byte
}

TEST(Tokenizer, EotToken) {
  Tokenizer tok = Tokenizer::train(english_corpus(), 300);
  EXPECT_EQ(tok.vocab_size(), 300);
  EXPECT_EQ(tok.eot_token(), 299);
  EXPECT_EQ(tok.decode_token(299), "<|endoftext|>");
  EXPECT_EQ(tok.decode({299}), "<|endoftext|>");
  for (int id : tok.encode("<|endoftext|>")) EXPECT_NE(id, 299);  // plain text, not the special
  expect_error_containing([&] { tok.decode_token(300); }, "300");
  expect_error_containing([&] { tok.decode({5, -1}); }, "-1");
}

TEST(Tokenizer, BadVocabSizeOrTooLittleText) {
  expect_error_containing([] { Tokenizer::train("hello world", 256); }, "--vocab-size");
  expect_error_containing([] { Tokenizer::train("hello world", 65537); }, "--vocab-size");
  expect_error_containing([] { Tokenizer::train("hello world", 4096); }, "lower --vocab-size");
  EXPECT_EQ(Tokenizer::train("", 257).vocab_size(), 257);
}

TEST(Tokenizer, LoadsLlmcFileForDecoding) {
  TokTempDir dir;
  const std::vector<std::string> toks = {"a", "bc", " d", std::string("\xff\0", 2), "<|endoftext|>"};
  auto write_llmc = [&](const std::string& path, int version, int V, int eot,
                        const std::vector<std::string>& t) {
    std::vector<uint32_t> h(256, 0);
    h[0] = 20240328, h[1] = version, h[2] = V, h[3] = eot;
    std::string d((const char*)h.data(), 1024);
    for (const std::string& s : t) d += (char)s.size() + s;
    write_bytes(path, d);
  };
  write_llmc(dir.file("v2.bin"), 2, 5, 4, toks);
  Tokenizer tok = Tokenizer::load(dir.file("v2.bin"));
  EXPECT_EQ(tok.vocab_size(), 5);
  EXPECT_EQ(tok.eot_token(), 4);
  EXPECT_FALSE(tok.can_encode());
  EXPECT_EQ(tok.decode({1, 0, 2, 3, 4}), std::string("bca d\xff\0<|endoftext|>", 20));
  expect_error_containing([&] { tok.encode("a"); }, "llm.c");

  // version 1 has no eot field: GPT-2's 50256
  std::vector<std::string> big(50257, "x");
  big[50256] = "<|endoftext|>";
  write_llmc(dir.file("v1.bin"), 1, 50257, 0, big);
  Tokenizer v1 = Tokenizer::load(dir.file("v1.bin"));
  EXPECT_EQ(v1.eot_token(), 50256);
  EXPECT_EQ(v1.decode({0, 50256}), "x<|endoftext|>");

  // truncated token table, extra bytes, bad version
  write_llmc(dir.file("short.bin"), 2, 6, 4, toks);
  expect_error_containing([&] { Tokenizer::load(dir.file("short.bin")); }, dir.file("short.bin"));
  std::string extra = read_bytes(dir.file("v2.bin")) + "zz";
  write_bytes(dir.file("extra.bin"), extra);
  expect_error_containing([&] { Tokenizer::load(dir.file("extra.bin")); }, dir.file("extra.bin"));
  write_llmc(dir.file("v3.bin"), 3, 5, 4, toks);
  expect_error_containing([&] { Tokenizer::load(dir.file("v3.bin")); }, dir.file("v3.bin"));
}

TEST(Tokenizer, BadFilesNameTheFile) {
  TokTempDir dir;
  Tokenizer tok = Tokenizer::train(english_corpus(), 400);
  const std::string good = dir.file("good.bin");
  tok.save(good);
  const std::string data = read_bytes(good);

  const std::string missing = dir.file("missing.bin");
  expect_error_containing([&] { Tokenizer::load(missing); }, missing);

  const std::string tiny = dir.file("tiny.bin");
  write_bytes(tiny, data.substr(0, 100));
  expect_error_containing([&] { Tokenizer::load(tiny); }, tiny);

  const std::string empty = dir.file("empty.bin");
  write_bytes(empty, "");
  expect_error_containing([&] { Tokenizer::load(empty); }, empty);

  const std::string trunc = dir.file("trunc.bin");
  write_bytes(trunc, data.substr(0, data.size() - 4));
  expect_error_containing([&] { Tokenizer::load(trunc); }, trunc);

  std::string m = data;
  m[0] ^= 0x5a;
  const std::string magic = dir.file("magic.bin");
  write_bytes(magic, m);
  expect_error_containing([&] { Tokenizer::load(magic); }, magic);

  std::string c = data;
  int32_t later = 399;  // merge 0 may only use ids < 256
  memcpy(&c[1024], &later, 4);
  const std::string corrupt = dir.file("corrupt.bin");
  write_bytes(corrupt, c);
  expect_error_containing([&] { Tokenizer::load(corrupt); }, corrupt);

  expect_error_containing([&] { Tokenizer::load(dir.path); }, dir.path);  // a directory
  expect_error_containing([&] { tok.save(dir.file("no/such/dir/tok.bin")); }, "no/such/dir");
}
