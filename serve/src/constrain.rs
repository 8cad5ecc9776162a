//! Output constraints as a token mask per step: a grammar (a JSON schema, or a tool call's
//! Lark grammar from `tools`) compiled by llguidance over the model's vocabulary, so a
//! sampled token can only continue text the grammar accepts, whatever the weights say.
//!
//! Why llguidance rather than a grammar engine of our own: it is maintained for exactly this
//! and already serves llama.cpp (its LLAMA_LLGUIDANCE backend), vLLM and SGLang; it covers
//! JSON Schema (refs, anyOf, numeric ranges, string lengths, patterns) and Lark; and its
//! token trie computes a 152k-vocabulary mask in a fraction of a millisecond (0.2-0.3 ms
//! measured, docs/measurements/2026-12-05-serve-agents.md), where a hand-written engine
//! would walk every token's bytes each step.

use crate::closing::{self, JsonCloser};
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use rocky_generate::{Constraint, TokenSet};
use rocky_models::tokenizer::{TokenKind, Tokenizer};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The vocabulary's token trie and llguidance's parser factory: built once per model (on the
/// first constrained request), shared by every grammar.
pub struct Grammars {
    factory: ParserFactory,
    shape: Arc<Shape>,
}

impl Grammars {
    /// Token `i` is its bytes; control tokens (`<|im_end|>` and the like) are marked as
    /// special (llguidance's 0xFF prefix), so no grammar text can spell them.
    pub fn new(tokenizer: &Tokenizer) -> Result<Grammars, String> {
        let n = tokenizer.vocab_size();
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| match tokenizer.token_kind(id) {
                Some(TokenKind::Control) => {
                    let mut w = vec![0xff];
                    w.extend(tokenizer.token_text(id).unwrap_or_default().bytes());
                    w
                }
                _ => tokenizer.token_bytes(id).unwrap_or_default(),
            })
            .collect();
        Self::from_words(&words, tokenizer.eos_id().unwrap_or(0))
    }

    /// Token `i` spells `words[i]`; `eos` is the end token.
    pub fn from_words(words: &[Vec<u8>], eos: u32) -> Result<Grammars, String> {
        let info = TokRxInfo::new(words.len() as u32, eos);
        let trie = TokTrie::from(&info, words);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        factory.quiet();
        Ok(Grammars {
            factory,
            shape: Arc::new(Shape::new(words)),
        })
    }

    /// A constraint following `grammar` from its start.
    pub fn guide(&self, grammar: TopLevelGrammar) -> Result<Guide, String> {
        let parser = self.factory.create_parser(grammar);
        let matcher = Matcher::new(parser);
        if let Some(e) = matcher.get_error() {
            return Err(e);
        }
        Ok(Guide {
            matcher,
            eos: self.factory.tok_env().tok_trie().eos_token(),
            spent: Duration::ZERO,
            masks: 0,
            prepared: None,
            closing: None,
        })
    }

    /// OpenAI's `json_object`: any JSON object, written compactly (", " and ": " between
    /// items, no other whitespace, which a model could otherwise repeat until `max_tokens`),
    /// and closed in time: as the draws left run short, only tokens after which the object
    /// can still be closed (one byte a token) and the end drawn are allowed, so the reply
    /// ends as a whole object rather than being cut. Where the vocabulary cannot spell the
    /// closing text a byte a token, the object is not closed early (a reply may be cut).
    pub fn json_object(&self) -> Result<Guide, String> {
        let mut guide = self.guide(TopLevelGrammar::from_json_schema(json_object_schema()))?;
        let env = self.factory.tok_env().clone();
        // Every byte a closing text may hold: brackets, separators, `0`, the literals'
        // letters, an escape's `n` or `F`, the quote, and the UTF-8 continuation bytes.
        let spelled = b"{}]\": 0nFtruefalsnul"
            .iter()
            .copied()
            .chain([0x80, 0x90, 0xa0])
            .all(|b| env.tok_trie().token_id(&[b]).is_some());
        if spelled {
            guide.closing = Some(Closing {
                json: JsonCloser::new(),
                env,
                shape: self.shape.clone(),
                left: None,
            });
        }
        Ok(guide)
    }
}

/// The schema `json_object` compiles: an object, with the layout [`closing`] follows.
pub fn json_object_schema() -> serde_json::Value {
    serde_json::json!({"type": "object", "x-guidance": {
        "whitespace_flexible": false,
        "item_separator": closing::ITEM_SEPARATOR,
        "key_separator": closing::KEY_SEPARATOR,
    }})
}

/// A `json_object` reply's closing: what closes the text so far, and the draws left.
struct Closing {
    json: JsonCloser,
    env: TokEnv,
    shape: Arc<Shape>,
    /// From [`Constraint::draws_left`]; None until told.
    left: Option<usize>,
}

impl Closing {
    /// Clears the tokens after which the object could no longer be closed, a byte a token,
    /// with a draw to spare for the end token, within the draws left. Leaves the mask as it
    /// is where no token (nor the end) is left (too few draws from the start, or text this
    /// tracker does not follow): the reply is then cut by `max_tokens` as it would be.
    fn restrict(&self, mask: &mut SimpleVob, eos: u32) {
        let (Some(left), Some(have)) = (self.left, self.json.closing_len()) else {
            return;
        };
        if left < 2 {
            // The last draw: only the end token leaves a whole object.
            if mask.is_allowed(eos) {
                *mask = self.env.tok_trie().singleton_token_set(eos);
            }
            return;
        }
        // After a token drawn now, `left - 1` draws remain: the closing text's bytes, then
        // the end token.
        let room = left - 2;
        // One byte grows the closing text by MAX_GROWTH at most, so tokens of up to `short`
        // bytes fit whatever they hold; inside a string, a token without `"` or `\` changes
        // it only by the bytes its last character still owes.
        let short = room.saturating_sub(have) / closing::MAX_GROWTH;
        let owed = self.json.in_plain_string().then(|| self.json.owed());
        let shape = &self.shape;
        let trie = self.env.tok_trie();
        let mut keep = mask.clone();
        for &t in &shape.longest_first {
            let i = t as usize;
            if shape.len[i] as usize <= short {
                break;
            }
            if t == eos || !mask.is_allowed(t) {
                continue;
            }
            let after = match owed {
                Some(owed) if shape.plain[i] => Some(
                    have - owed
                        + match shape.owes[i] {
                            // Only continuation bytes: they pay what was owed.
                            None => owed.saturating_sub(shape.len[i] as usize),
                            Some(n) => n as usize,
                        },
                ),
                _ => self.json.closing_len_after(trie.token(t)),
            };
            match after {
                Some(n) if n <= room => {}
                _ => keep.disallow_token(t),
            }
        }
        if !keep.is_zero() {
            *mask = keep;
        }
    }
}

/// What [`Closing::restrict`] needs of each token, computed once per vocabulary: its length
/// in bytes, whether it holds neither `"` nor `\`, the UTF-8 continuation bytes its last
/// character still owes (None: it is all continuation bytes), and the tokens longest first.
struct Shape {
    len: Vec<u32>,
    plain: Vec<bool>,
    owes: Vec<Option<u8>>,
    longest_first: Vec<u32>,
}

impl Shape {
    fn new(words: &[Vec<u8>]) -> Shape {
        let len: Vec<u32> = words.iter().map(|w| w.len() as u32).collect();
        let plain = words
            .iter()
            .map(|w| !w.contains(&b'"') && !w.contains(&b'\\'))
            .collect();
        let owes = words
            .iter()
            .map(|w| {
                let last = w.iter().rposition(|&b| b & 0xc0 != 0x80)?;
                let need = match w[last] {
                    0xc0..=0xdf => 1,
                    0xe0..=0xef => 2,
                    0xf0..=0xff => 3,
                    _ => 0,
                };
                Some((need as usize).saturating_sub(w.len() - 1 - last) as u8)
            })
            .collect();
        let mut longest_first: Vec<u32> = (0..words.len() as u32).collect();
        longest_first.sort_by_key(|&t| std::cmp::Reverse(len[t as usize]));
        Shape {
            len,
            plain,
            owes,
            longest_first,
        }
    }
}

/// One request's grammar state.
pub struct Guide {
    matcher: Matcher,
    /// The trie's end token: allowed where the grammar may end, which lets the model's own
    /// end-of-generation tokens through.
    eos: u32,
    /// Time in [`Constraint::mask`] and [`Constraint::accept`] so far: the grammar's share of
    /// the decode steps, reported in the reply's `timings`.
    spent: Duration,
    /// Masks computed so far (one per sampled token).
    masks: usize,
    /// The next mask, computed ahead of the logits by [`Constraint::prepare`] (while the
    /// device evaluates the step); `mask` takes it, or computes it where none is ready.
    prepared: Option<SimpleVob>,
    /// `json_object`'s closing within the draws left (see [`Grammars::json_object`]).
    closing: Option<Closing>,
}

impl Guide {
    /// The time the grammar took (mask, applying it and advancing the parser) and the number
    /// of masks it computed.
    pub fn cost(&self) -> (Duration, usize) {
        (self.spent, self.masks)
    }

    fn next_mask(&mut self) -> Result<SimpleVob, String> {
        let mut mask = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| e.to_string())?;
        if let Some(closing) = &self.closing {
            closing.restrict(&mut mask, self.eos);
        }
        Ok(mask)
    }

    /// The tokens allowed next: the grammar's mask (prepared, or computed now), with the
    /// model's end tokens (end of turn, EOS) as the grammar's one "end" token: allowed where
    /// the grammar may end, whatever the trie says of each.
    fn allowed_timed(&mut self, allowed: &mut TokenSet, end: &[u32]) -> Result<(), String> {
        let mask = match self.prepared.take() {
            Some(mask) => mask,
            None => self.next_mask()?,
        };
        let may_end = mask.is_allowed(self.eos);
        // 19 KB for a 152k vocabulary: the draw then reads only the allowed tokens' logits,
        // where writing −∞ into the others' took ~13 µs a token on the development VM and the
        // draw then scanned them all (serve/examples/host_cost).
        allowed.copy_from_words(mask.as_slice());
        for &id in end {
            allowed.set(id, may_end);
        }
        Ok(())
    }
}

impl Constraint for Guide {
    /// The dense form of [`Constraint::allowed`]: −∞ into every forbidden token's logit.
    fn mask(&mut self, logits: &mut [f32], end: &[u32]) -> Result<(), String> {
        let mut allowed = TokenSet::new(logits.len());
        self.allowed(&mut allowed, end)?;
        let start = Instant::now();
        allowed.apply(logits);
        self.spent += start.elapsed();
        Ok(())
    }

    fn allowed(&mut self, allowed: &mut TokenSet, end: &[u32]) -> Result<bool, String> {
        let start = Instant::now();
        let r = self.allowed_timed(allowed, end);
        self.spent += start.elapsed();
        self.masks += 1;
        r.map(|()| true)
    }

    fn accept(&mut self, token: u32) -> Result<(), String> {
        let start = Instant::now();
        self.prepared = None;
        let r = self.matcher.consume_token(token).map_err(|e| e.to_string());
        if let Some(c) = &mut self.closing {
            c.json.push(c.env.tok_trie().token(token));
        }
        self.spent += start.elapsed();
        r
    }

    fn draws_left(&mut self, left: usize) {
        if let Some(c) = &mut self.closing {
            if c.left != Some(left) {
                c.left = Some(left);
                self.prepared = None;
            }
        }
    }

    /// The mask's computation, on the generation loop's second thread while the step runs
    /// (its time still counts in [`Guide::cost`]: the grammar's work, overlapped or not).
    fn prepare(&mut self) -> Result<(), String> {
        if self.prepared.is_none() {
            let start = Instant::now();
            let mask = self.next_mask();
            self.spent += start.elapsed();
            self.prepared = Some(mask?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Piece, ToolFormat, ToolStream};
    use rand::{Rng, SeedableRng};
    use serde_json::{json, Value};

    /// A vocabulary of the 256 bytes, a few multi-byte tokens, and an end token (the last).
    fn words() -> Vec<Vec<u8>> {
        let mut w: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        for t in ["<tool_call>", "\"name\": \"", "{\"", "\n", "true", "12"] {
            w.push(t.as_bytes().to_vec());
        }
        w.push(b"\xff<end>".to_vec());
        w
    }

    /// Text drawn from uniformly random logits under `grammar` until the end token.
    fn draw(grammars: &Grammars, grammar: TopLevelGrammar, seed: u64) -> String {
        let words = words();
        let end = [words.len() as u32 - 1];
        let mut guide = grammars.guide(grammar).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut out = Vec::new();
        for _ in 0..2000 {
            let mut logits: Vec<f32> = (0..words.len()).map(|_| rng.gen()).collect();
            guide.mask(&mut logits, &end).unwrap();
            let next = (0..logits.len())
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                .unwrap() as u32;
            assert!(logits[next as usize].is_finite(), "something is allowed");
            if end.contains(&next) {
                return String::from_utf8(out).unwrap();
            }
            out.extend_from_slice(&words[next as usize]);
            guide.accept(next).unwrap();
        }
        panic!("no end: {}", String::from_utf8_lossy(&out));
    }

    #[test]
    fn random_logits_under_a_tool_grammar_write_one_valid_call() {
        let grammars = Grammars::from_words(&words(), words().len() as u32 - 1).unwrap();
        let tools = [
            json!({"type": "function", "function": {"name": "pick", "parameters": {
                "type": "object", "properties": {"x": {"enum": ["a", "b"]},
                "n": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": ["x", "n"], "additionalProperties": false}}}),
            json!({"type": "function", "function": {"name": "flag", "parameters": {
                "type": "object", "properties": {"on": {"type": "boolean"}},
                "required": ["on"], "additionalProperties": false}}}),
        ];
        let chosen: Vec<&Value> = tools.iter().collect();
        for format in [ToolFormat::Hermes, ToolFormat::LlamaJson] {
            for seed in 0..20 {
                let grammar = TopLevelGrammar::from_lark(format.call_grammar(&chosen));
                let text = draw(&grammars, grammar, seed);
                let mut split = ToolStream::new(format);
                let mut pieces = split.push(&text);
                pieces.extend(split.finish());
                let [Piece::Call(call)] = &pieces[..] else {
                    panic!("{format:?} seed {seed}: {text:?} gives {pieces:?}")
                };
                let args: Value = serde_json::from_str(&call.arguments).unwrap();
                match call.name.as_str() {
                    "pick" => {
                        assert!(args["x"] == "a" || args["x"] == "b", "{text}");
                        let n = args["n"].as_i64().unwrap();
                        assert!((1..=9).contains(&n), "{text}");
                        assert_eq!(args.as_object().unwrap().len(), 2, "{text}");
                    }
                    "flag" => assert!(args["on"].is_boolean(), "{text}"),
                    other => panic!("{other} is no tool: {text}"),
                }
            }
        }
    }

    /// [`words`] and a few longer JSON pieces (one long enough to need the closing's closer
    /// look), the end token still last.
    fn json_words() -> Vec<Vec<u8>> {
        let mut w = words();
        let end = w.pop().unwrap();
        for t in [
            "\"}",
            "\": ",
            ", \"",
            "[[[[",
            "]}",
            "\"hello world",
            "\\u00",
            "-1.5e",
            "abcdefghijklmnopqrstuvwxyz0123456789",
            "\u{e9}t\u{e9}",
            "{}",
        ] {
            w.push(t.as_bytes().to_vec());
        }
        w.push(end);
        w
    }

    /// serde_json's judgement of `text`: one JSON object, nothing after it (its syntax only:
    /// a number such as 66e782 is JSON, though out of an f64's range).
    fn assert_json_object(text: &[u8]) {
        let shown = String::from_utf8_lossy(text);
        assert!(text.starts_with(b"{"), "{shown:?}");
        serde_json::from_slice::<serde::de::IgnoredAny>(text)
            .unwrap_or_else(|e| panic!("{e}: {shown:?}"));
    }

    fn argmax(logits: &[f32]) -> u32 {
        (0..logits.len())
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
            .unwrap() as u32
    }

    #[test]
    fn every_prefix_of_a_json_object_reply_closes_as_llguidance_and_serde_json_agree() {
        let words = json_words();
        let end = words.len() as u32 - 1;
        let grammars = Grammars::from_words(&words, end).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut states = std::collections::HashSet::new();
        for _ in 0..40 {
            let mut guide = grammars.json_object().unwrap();
            let mut text = Vec::new();
            for _ in 0..80 {
                // Random logits, structure favoured so that every kind of state comes up.
                let mut logits: Vec<f32> = words
                    .iter()
                    .map(|w| {
                        let structural =
                            w.len() == 1 && b"{}[]\",: -.eE0123456789tfnu\\".contains(&w[0]);
                        rng.gen::<f32>() + if structural { 0.9 } else { 0.0 }
                    })
                    .collect();
                guide.mask(&mut logits, &[end]).unwrap();
                let next = argmax(&logits);
                if next == end {
                    break;
                }
                // One byte grows the closing text by MAX_GROWTH at most.
                let mut json = guide.closing.as_ref().unwrap().json.clone();
                for &b in &words[next as usize] {
                    let before = json.closing_len().unwrap();
                    json.push(&[b]);
                    assert!(json.closing_len().unwrap() <= before + closing::MAX_GROWTH);
                }
                guide.accept(next).unwrap();
                text.extend_from_slice(&words[next as usize]);
                let json = &guide.closing.as_ref().unwrap().json;
                states.insert(json.place());
                let close = json
                    .closing()
                    .unwrap_or_else(|| panic!("lost at {:?}", String::from_utf8_lossy(&text)));
                // serde_json reads the text and its closing as an object...
                let whole = [&text[..], &close[..]].concat();
                assert_json_object(&whole);
                // ...and the grammar takes the closing a byte a token, then may end.
                let trie = grammars.factory.tok_env().tok_trie();
                let tokens: Vec<u32> = close
                    .iter()
                    .map(|&b| trie.token_id(&[b]).unwrap())
                    .collect();
                let mut m = guide.matcher.deep_clone();
                assert_eq!(
                    m.try_consume_tokens(&tokens).unwrap(),
                    tokens.len(),
                    "{:?}",
                    String::from_utf8_lossy(&whole)
                );
                assert!(
                    m.is_accepting().unwrap(),
                    "{:?}",
                    String::from_utf8_lossy(&whole)
                );
            }
        }
        // Strings, keys, numbers, literals, arrays, escapes and separators all came up.
        for place in [
            "Key",
            "Str",
            "Escape",
            "AfterKey",
            "AfterColon",
            "AfterComma",
            "Value",
            "ObjectStart",
            "ArrayStart",
            "AfterValue",
            "Literal",
            "Number(Minus)",
            "Number(Frac)",
            "Number(Exp)",
            "Done",
        ] {
            assert!(states.contains(place), "{place} never came: {states:?}");
        }
    }

    /// A reply drawn from uniform random logits (every allowed token alike, as weights that
    /// know nothing would): the text, and whether it ended (the end token drawn) within
    /// `budget` draws. `tell`: the guide hears the draws left, as the generation loop tells it.
    fn draw_within(
        grammars: &Grammars,
        words: &[Vec<u8>],
        seed: u64,
        budget: usize,
        tell: bool,
    ) -> (String, bool) {
        let end = [words.len() as u32 - 1];
        let mut guide = grammars.json_object().unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut out = Vec::new();
        for draw in 0..budget {
            if tell {
                guide.draws_left(budget - draw);
            }
            if draw > 0 && draw % 2 == 0 {
                guide.prepare().unwrap();
            }
            let mut logits: Vec<f32> = (0..words.len()).map(|_| rng.gen()).collect();
            guide.mask(&mut logits, &end).unwrap();
            let next = argmax(&logits);
            if end.contains(&next) {
                return (String::from_utf8(out).unwrap(), true);
            }
            out.extend_from_slice(&words[next as usize]);
            guide.accept(next).unwrap();
        }
        (String::from_utf8_lossy(&out).into_owned(), false)
    }

    #[test]
    fn json_object_replies_from_random_logits_end_whole_within_the_draws_left() {
        let words = json_words();
        let grammars = Grammars::from_words(&words, words.len() as u32 - 1).unwrap();
        for budget in [2, 3, 4, 7, 12, 40, 128] {
            for seed in 0..12 {
                let (text, ended) = draw_within(&grammars, &words, seed, budget, true);
                assert!(ended, "budget {budget}, seed {seed}: cut at {text:?}");
                assert_json_object(text.as_bytes());
            }
        }
        // Not told the draws left, the same draws write a key or string until the budget
        // cuts it, unless the first draw was `{}`: what the closing prevents.
        let cut = (0..24)
            .filter(|&seed| !draw_within(&grammars, &words, seed, 40, false).1)
            .count();
        assert!(cut >= 6, "{cut} of 24 cut");
    }

    /// Qwen2's 151,936-token vocabulary (llama.cpp's ggml-vocab-qwen2.gguf), uniform random
    /// logits, 128 draws: every reply a whole object (the json_object sweep, with
    /// the worst-case model).
    #[test]
    fn json_object_replies_on_qwens_vocabulary_all_parse_within_128_draws() {
        use rocky_models::gguf::GgufFile;
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../assets/vocab/ggml-vocab-qwen2.gguf"
        );
        let tokenizer = Tokenizer::from_gguf(&GgufFile::open(path).unwrap()).unwrap();
        let grammars = Grammars::new(&tokenizer).unwrap();
        let n = tokenizer.vocab_size();
        let end = [tokenizer.eos_id().unwrap()];
        let mut slowest = Duration::ZERO;
        for seed in 0..12u64 {
            let mut guide = grammars.json_object().unwrap();
            assert!(
                guide.closing.is_some(),
                "Qwen's vocabulary spells every closing byte"
            );
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut out = Vec::new();
            let mut ended = false;
            for draw in 0..128 {
                guide.draws_left(128 - draw);
                let start = Instant::now();
                guide.prepare().unwrap();
                slowest = slowest.max(start.elapsed());
                let mut logits: Vec<f32> = (0..n).map(|_| rng.gen()).collect();
                guide.mask(&mut logits, &end).unwrap();
                let next = argmax(&logits);
                if end.contains(&next) {
                    ended = true;
                    break;
                }
                out.extend(tokenizer.token_bytes(next).unwrap());
                guide.accept(next).unwrap();
            }
            let text = String::from_utf8_lossy(&out);
            assert!(ended, "seed {seed}: cut at {text:?}");
            assert_json_object(&out);
        }
        eprintln!("slowest mask with the closing: {slowest:?}");
    }

    /// The set a guide gives the draw, against llguidance's own mask for the same state:
    /// each token as the mask says, the model's end tokens as the grammar's end; on Qwen's
    /// vocabulary (151,936 ids, a multiple of 32 not needed), masks prepared ahead or not.
    #[test]
    fn the_allowed_set_is_llguidances_mask_with_the_end_tokens() {
        use rocky_generate::{Sampler, SamplerParams};
        use rocky_models::gguf::GgufFile;
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../assets/vocab/ggml-vocab-qwen2.gguf"
        );
        let tokenizer = Tokenizer::from_gguf(&GgufFile::open(path).unwrap()).unwrap();
        let grammars = Grammars::new(&tokenizer).unwrap();
        let n = tokenizer.vocab_size();
        // The trie's end and another end token (as Qwen's <|im_end|> beside <|endoftext|>).
        let end = [tokenizer.eos_id().unwrap(), 151645];
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 6},
            "n": {"type": "integer", "minimum": 0, "maximum": 50}},
            "required": ["name", "n"], "additionalProperties": false,
            "x-guidance": {"whitespace_flexible": false, "item_separator": ", ",
                           "key_separator": ": "}});
        let mut set = TokenSet::new(n + 7);
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for seed in 0..3 {
            let mut guide = grammars
                .guide(TopLevelGrammar::from_json_schema(schema.clone()))
                .unwrap();
            let mut sampler = Sampler::new(SamplerParams {
                temperature: 1.0,
                seed,
                ..SamplerParams::default()
            })
            .unwrap();
            for step in 0..40 {
                if step % 2 == 1 {
                    guide.prepare().unwrap();
                }
                let want = guide.matcher.compute_mask_or_eos().unwrap();
                assert!(guide.allowed(&mut set, &end).unwrap());
                let may_end = want.is_allowed(guide.eos);
                for id in 0..set.len() as u32 {
                    let expect = if end.contains(&id) {
                        may_end
                    } else {
                        (id as usize) < n && want.is_allowed(id)
                    };
                    assert_eq!(
                        set.contains(id),
                        expect,
                        "seed {seed}, step {step}, id {id}"
                    );
                }
                let logits: Vec<f32> = (0..set.len()).map(|_| rng.gen::<f32>() * 4.0).collect();
                let next = sampler.sample_in(&logits, &[], Some(&set));
                if end.contains(&next) {
                    break;
                }
                guide.accept(next).unwrap();
            }
        }
    }

    #[test]
    fn a_schema_llguidance_cannot_compile_is_an_error_not_a_panic() {
        let grammars = Grammars::from_words(&words(), words().len() as u32 - 1).unwrap();
        let bad = json!({"type": "string", "pattern": "("});
        assert!(grammars
            .guide(TopLevelGrammar::from_json_schema(bad))
            .is_err());
    }
}
