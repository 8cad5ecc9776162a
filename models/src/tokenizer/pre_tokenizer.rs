//! How a byte-level BPE vocabulary cuts raw text into words before merging: llama.cpp
//! 0c1e57098's `tokenizer.ggml.pre` table (`llama_vocab::impl::load`) and its split rules
//! (`llm_tokenizer_bpe`). Each name maps to one [`SplitRule`] plus the per-name flags llama.cpp
//! sets beside it (ignore_merges, a default BOS, clean-up of spaces); each rule is written once.
//!
//! A rule is a list of regexes applied in turn, each cutting every piece the previous ones left
//! into its matches and the text between them (llama.cpp's `unicode_regex_split`). The regexes
//! are llama.cpp's own strings, which it runs either through hand-written splitters or through
//! std::regex on a "collapsed" text (every non-ASCII character replaced by one stand-in of its
//! Unicode category); both are equivalent to running the regex on the real text with Unicode
//! classes, which is what fancy-regex does here.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

// Non-ASCII characters in the regexes are written as \x{..} escapes of llama.cpp's exact code
// points: pasted as text, some (U+1F7D, U+212A, ...) get NFC-normalized into others on the way.

/// GPT-2's split (llama.cpp's `unicode_regex_split_custom_gpt2`).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's split with the case-insensitive contractions spelled out, digits in runs of up to 3.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's split: as Llama 3's but one digit per word.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// DeepSeek V3's (and Hunyuan-dense's, HY v4's, JoyAI's) words after digits and CJK runs.
const DEEPSEEK3_WORDS: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;
/// BLOOM's (and Poro's, GPT-3-Finnish's, Viking's) split: anything up to whitespace or a few
/// punctuation marks (the parentheses and `|` are literally part of llama.cpp's class).
const BLOOM: &str = r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+";

/// One split rule of llama.cpp (`LLAMA_VOCAB_PRE_TYPE_*`, rules that share regexes merged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitRule {
    /// No or an unknown `tokenizer.ggml.pre`: punctuation runs, GPT-2's split, digit runs, then
    /// ASCII digits in threes.
    Default,
    Gpt2,
    Llama3,
    Jais2,
    Qwen2,
    Qwen35,
    DeepseekLlm,
    DeepseekCoder,
    Deepseek3,
    Spark25,
    Youtu,
    Falcon,
    /// StarCoder, Refact, Command-R, SmolLM, CodeShell, EXAONE, Minerva, Mellum 2: each digit
    /// alone, then GPT-2's split.
    Starcoder,
    Bloom,
    Viking,
    Tekken,
    Chameleon,
    Gpt4o,
    GraniteEmbedMulti,
    SuperBpe,
    BailingMoe,
    SeedCoder,
    Ufakzeka,
    Laguna,
    ExaoneMoe,
    MiniCpm5,
    /// Gemma 4 (and Granite-embed-multi-311m): BPE over raw UTF-8, spaces escaped as U+2581,
    /// the text cut only into runs of newlines and of other characters, a run of newlines
    /// that is a vocabulary token taken whole, characters without a token spelled `<0xXX>`.
    Gemma4,
    /// Sarvam-MoE: as Gemma 4 without the newline-run rule.
    SarvamMoe,
    /// Rules llama.cpp implements with hand-written code or outside byte-level BPE, which rocky
    /// does not reproduce (the string says what is missing).
    NotImplemented(&'static str),
}

impl SplitRule {
    /// Whether words are spelled in GPT-2's byte-level alphabet (false: raw UTF-8 with spaces
    /// escaped as U+2581, llama.cpp's `byte_encode = false` and `escape_whitespaces`).
    pub fn byte_level(self) -> bool {
        !matches!(self, SplitRule::Gemma4 | SplitRule::SarvamMoe)
    }

    /// The regexes, in the order llama.cpp applies them.
    pub fn regexes(self) -> Result<Vec<&'static str>, &'static str> {
        use SplitRule::*;
        Ok(match self {
            Default => vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
            Gpt2 => vec![GPT2],
            Llama3 => vec![LLAMA3],
            Jais2 => vec![
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}",
            ],
            Qwen2 => vec![QWEN2],
            Qwen35 => vec![
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            DeepseekLlm => vec![
                r"[\r\n]",
                r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+",
                r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+",
                r"\s+$",
                r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
                r"\p{N}+",
            ],
            DeepseekCoder => vec![
                r"[\r\n]",
                r"\s?\p{L}+",
                r"\s?\p{P}+",
                r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
                r"\p{N}",
            ],
            Deepseek3 => vec![
                r"\p{N}{1,3}",
                r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
                DEEPSEEK3_WORDS,
            ],
            Spark25 => vec![
                r"\p{N}{1,3}",
                r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
                r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+"##,
                r"\p{N}",
            ],
            Youtu => vec![
                r"[\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
                // llama.cpp reads \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm} and \p{Lo} all as \p{L} (its
                // collapsed text has one stand-in for every letter), so upstream's case
                // distinctions are gone; written here as llama.cpp runs it.
                r"[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]*[\p{L}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+[\p{L}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            Falcon => vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
            Starcoder => vec![r"\p{N}", GPT2],
            Bloom => vec![BLOOM],
            Viking => vec![BLOOM, r"\p{N}"],
            Tekken => vec![
                r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            Chameleon => vec![
                r"<sentinel:[0-9]+>",
                r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                r"([\t\n]|    |  )",
                r"\p{N}",
                r"[\p{P}!-/:-@\[-`{-~]",
                GPT2,
            ],
            Gpt4o => vec![
                r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            GraniteEmbedMulti => vec![
                r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            // std::regex's \d is ASCII only, so it is spelled [0-9] for fancy-regex.
            SuperBpe => vec![r"\p{N}+", r"(?=([0-9]{3})+(?![0-9]))"],
            BailingMoe => vec![
                r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
            ],
            SeedCoder => vec![
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            Ufakzeka => vec![
                r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            Laguna => vec![r"[^\n]+|[\n]+", QWEN2],
            ExaoneMoe => vec![
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",
            ],
            MiniCpm5 => vec![
                r"\p{N}{1,3}",
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            Gemma4 | SarvamMoe => vec![r"[^\n]+|[\n]+"],
            NotImplemented(why) => return Err(why),
        })
    }
}

/// llama.cpp's settings for one `tokenizer.ggml.pre` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreTokenizer {
    /// The name as llama.cpp spells it ("default" for a vocabulary without one).
    pub name: &'static str,
    pub rule: SplitRule,
    /// A word that is itself a vocabulary token is that token, whatever the merges make of it.
    pub ignore_merges: bool,
    /// BOS added when the file has no `tokenizer.ggml.add_bos_token`.
    pub default_add_bos: bool,
    /// llama.cpp's detokenizer removes the space before `?!.,` and some apostrophes
    /// (`clean_up_tokenization_spaces`); rocky reports it and decodes losslessly.
    pub clean_spaces: bool,
    /// ChatGLM/GLM vocabularies: no BOS id unless the file names one.
    pub no_default_bos: bool,
}

/// Flag shorthands for the table.
const IGNORE_MERGES: u8 = 1;
const ADD_BOS: u8 = 2;
const KEEP_SPACES: u8 = 4;
const NO_BOS: u8 = 8;

/// llama.cpp 0c1e57098's names, each with its rule and flags (`clean_spaces` is on unless
/// KEEP_SPACES). Names that share a row behave identically.
const TABLE: &[(&[&str], SplitRule, u8)] = {
    use SplitRule::*;
    &[
        (&["default"], Default, 0),
        (&["minicpm5"], MiniCpm5, IGNORE_MERGES),
        (
            &[
                "llama3",
                "llama-v3",
                "llama-bpe",
                "falcon3",
                "falcon-h1",
                "pixtral",
                "midm-2.0",
                "lfm2",
                "jina-v5-nano",
            ],
            Llama3,
            IGNORE_MERGES | ADD_BOS,
        ),
        (&["deepseek-llm"], DeepseekLlm, KEEP_SPACES),
        (&["deepseek-coder"], DeepseekCoder, KEEP_SPACES),
        (&["deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"], Deepseek3, KEEP_SPACES),
        (&["spark2_5"], Spark25, KEEP_SPACES),
        (&["youtu"], Youtu, KEEP_SPACES | IGNORE_MERGES),
        (&["falcon"], Falcon, 0),
        (
            &[
                "mpt",
                "gpt-2",
                "phi-2",
                "jina-es",
                "jina-de",
                "gigachat",
                "jina-v2-es",
                "jina-v2-de",
                "a.x-4.0",
                "mellum",
                "modern-bert",
                "jina-v1-en",
                "jina-v2-code",
                "roberta-bpe",
                "olmo",
                "jais",
                "exaone4",
            ],
            Gpt2,
            0,
        ),
        (&["trillion", "granite-docling"], Gpt2, KEEP_SPACES),
        (&["jais-2"], Jais2, 0),
        (&["starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"], Starcoder, 0),
        (&["command-r", "smollm"], Starcoder, KEEP_SPACES),
        (
            &[
                "qwen2",
                "deepseek-r1-qwen",
                "kormo",
                "f2llmv2",
                "hunyuan",
                "solar-open",
                "grok-2",
            ],
            Qwen2,
            KEEP_SPACES,
        ),
        (&["stablelm2", "megrez"], Qwen2, 0),
        (&["qwen35"], Qwen35, KEEP_SPACES),
        (&["dbrx", "smaug-bpe"], Llama3, 0),
        (&["chatglm-bpe"], Llama3, NO_BOS),
        (&["glm4", "glm5"], Llama3, NO_BOS | IGNORE_MERGES),
        (&["poro-chat"], Bloom, KEEP_SPACES),
        (&["bloom", "gpt3-finnish"], Bloom, 0),
        (&["viking"], Viking, KEEP_SPACES),
        (&["tekken"], Tekken, KEEP_SPACES | IGNORE_MERGES | ADD_BOS),
        (&["chameleon"], Chameleon, ADD_BOS | KEEP_SPACES),
        (&["exaone-moe"], ExaoneMoe, 0),
        (&["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"], Gpt4o, KEEP_SPACES),
        (&["granite-embed-multi-97m"], GraniteEmbedMulti, KEEP_SPACES | IGNORE_MERGES),
        (&["superbpe"], SuperBpe, KEEP_SPACES),
        (&["bailingmoe", "bailingmoe2", "llada-moe"], BailingMoe, KEEP_SPACES),
        (&["seed-coder"], SeedCoder, KEEP_SPACES),
        (&["ufakzeka"], Ufakzeka, KEEP_SPACES),
        (&["laguna"], Laguna, KEEP_SPACES),
        (
            &["tiny_aya", "cohere2moe"],
            NotImplemented("llama.cpp groups digits in threes from the right with hand-written code, which rocky does not reproduce"),
            KEEP_SPACES,
        ),
        (
            &["kimi-k2"],
            NotImplemented("llama.cpp splits Kimi-K2 text with hand-written code and merges without a merge list, which rocky does not reproduce"),
            KEEP_SPACES,
        ),
        (
            &["afmoe"],
            NotImplemented("llama.cpp groups AFMoE digits with hand-written code, which rocky does not reproduce"),
            KEEP_SPACES,
        ),
        // llama.cpp forces a BOS for Gemma 4 even when the file says not to add one.
        (&["gemma4", "granite-embed-multi-311m"], Gemma4, ADD_BOS),
        (&["sarvam-moe"], SarvamMoe, KEEP_SPACES),
        (
            &["whitespace"],
            NotImplemented("the whitespace pre-tokenizer (Jina v2 zh) works on raw UTF-8 with its own session, which rocky does not implement"),
            0,
        ),
    ]
};

impl PreTokenizer {
    /// The settings of a `tokenizer.ggml.pre` value, None for a name llama.cpp does not know.
    pub fn from_gguf_name(name: &str) -> Option<PreTokenizer> {
        TABLE.iter().find_map(|(names, rule, flags)| {
            let name = *names.iter().find(|n| **n == name)?;
            Some(PreTokenizer {
                name,
                rule: *rule,
                ignore_merges: flags & IGNORE_MERGES != 0,
                default_add_bos: flags & ADD_BOS != 0,
                clean_spaces: flags & KEEP_SPACES == 0,
                no_default_bos: flags & NO_BOS != 0,
            })
        })
    }

    /// llama.cpp's fallback for a vocabulary without `tokenizer.ggml.pre`.
    pub fn default_rule() -> PreTokenizer {
        PreTokenizer::from_gguf_name("default").expect("the table has a default row")
    }

    /// Every name llama.cpp 0c1e57098 knows, with its rule (for `rocky info` and tests).
    pub fn known_names() -> impl Iterator<Item = (&'static str, SplitRule)> {
        TABLE
            .iter()
            .flat_map(|(names, rule, _)| names.iter().map(move |n| (*n, *rule)))
    }

    /// The Hugging Face pre-tokenizer: each regex splits every piece into matches and the gaps
    /// between them (as llama.cpp's `unicode_regex_split`), then the byte-level mapping without
    /// its own GPT-2 regex.
    pub fn hf_pre_tokenizer(&self) -> Result<PreTokenizerWrapper, String> {
        let regexes = self
            .rule
            .regexes()
            .map_err(|why| format!("pre-tokenizer \"{}\" is not supported: {why}", self.name))?;
        let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(regexes.len() + 1);
        for regex in regexes {
            let split = Split::new(
                SplitPattern::Regex(regex.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| format!("the split regex {regex:?} does not compile: {e}"))?;
            steps.push(split.into());
        }
        if self.rule.byte_level() {
            steps.push(ByteLevel::new(false, false, false).into());
        }
        Ok(Sequence::new(steps).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_name_is_listed_once_and_every_rule_compiles() {
        let mut seen = HashSet::new();
        for (name, rule) in PreTokenizer::known_names() {
            assert!(seen.insert(name), "{name} listed twice");
            let pre = PreTokenizer::from_gguf_name(name).unwrap();
            assert_eq!(pre.rule, rule);
            match rule {
                SplitRule::NotImplemented(_) => assert!(pre.hf_pre_tokenizer().is_err()),
                _ => {
                    pre.hf_pre_tokenizer()
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                }
            }
        }
        assert!(seen.len() > 80, "{} names", seen.len());
        assert!(PreTokenizer::from_gguf_name("no-such-pre").is_none());
    }

    #[test]
    fn flags_follow_llama_cpp() {
        let llama3 = PreTokenizer::from_gguf_name("llama-bpe").unwrap();
        assert!(llama3.ignore_merges && llama3.default_add_bos && llama3.clean_spaces);
        let dbrx = PreTokenizer::from_gguf_name("dbrx").unwrap();
        assert_eq!(dbrx.rule, SplitRule::Llama3);
        assert!(!dbrx.ignore_merges && !dbrx.default_add_bos);
        let qwen2 = PreTokenizer::from_gguf_name("qwen2").unwrap();
        assert!(!qwen2.clean_spaces && !qwen2.ignore_merges);
        assert!(
            PreTokenizer::from_gguf_name("stablelm2")
                .unwrap()
                .clean_spaces
        );
        assert!(PreTokenizer::from_gguf_name("glm4").unwrap().no_default_bos);
    }
}
