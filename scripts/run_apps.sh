#!/usr/bin/env bash
# Run real programs with and without LD_PRELOAD=LIB and compare what they do.
#
#   scripts/run_apps.sh [LIB]        LIB defaults to ./libhakmem.so
#
# Every app runs twice in its own scratch directory: once plainly (the
# reference) and once with LIB preloaded; its stdout and exit status must be
# the same both times.  Each run is bounded by `timeout` (APP_TIMEOUT seconds,
# default 120).  Prints `PASS app` or `FAIL app (reason)` per app and exits 1
# if any app failed.  APPS="python3 git" runs only the apps named.
set -uo pipefail

LIB="${1:-./libhakmem.so}"
TMO="${APP_TIMEOUT:-120}"
ALL_APPS=(python3 git gcc perl sort)
read -r -a APPS <<<"${APPS:-${ALL_APPS[*]}}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hakmem-apps.XXXXXX")" || { echo "run_apps: mktemp failed" >&2; exit 1; }
[ -n "$WORK" ] && [ -d "$WORK" ] || { echo "run_apps: no work directory" >&2; exit 1; }
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT

# ---------------------------------------------------------------------------
# Inputs, written once (without the preload).
# ---------------------------------------------------------------------------
mkdir -p "$WORK/in"

cat >"$WORK/in/work.py" <<'PYEOF'
import hashlib, json, re, sqlite3, threading, random, collections

rng = random.Random(12345)
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta",
         "iota", "kappa", "lambda", "mu", "nu", "xi", "omicron", "pi", "rho"]

# 1. dict/list-heavy computation: word counts, nested structures, sorting.
docs = [" ".join(rng.choice(WORDS) + str(rng.randrange(50)) for _ in range(rng.randrange(5, 60)))
        for _ in range(8000)]
counts = collections.Counter(w for d in docs for w in d.split())
index = collections.defaultdict(list)
for i, d in enumerate(docs):
    for w in set(d.split()):
        index[w].append(i)
top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
print("docs", len(docs), "distinct", len(counts), "top", top)
print("index sizes", sum(len(v) for v in index.values()), max(len(v) for v in index.values()))

# 2. json round trips of nested data.
tree = {"k%d" % i: {"vals": [rng.random() for _ in range(20)],
                    "name": rng.choice(WORDS) * rng.randrange(1, 40),
                    "tags": {w: rng.randrange(1000) for w in rng.sample(WORDS, 5)}}
        for i in range(3000)}
blob = json.dumps(tree, sort_keys=True)
back = json.loads(blob)
assert back == tree
print("json bytes", len(blob), "sha", hashlib.sha256(blob.encode()).hexdigest()[:16])

# 3. regexes.
pat = re.compile(r"([a-z]+)(\d+)")
nums = collections.Counter()
for d in docs[:8000]:
    for m in pat.finditer(d):
        nums[m.group(1)] += int(m.group(2))
subbed = [re.sub(r"(\w+?)a(\d)", r"<\2\1>", d) for d in docs[:3000]]
print("regex", sorted(nums.items())[:5], hashlib.sha256("".join(subbed).encode()).hexdigest()[:16])

# 4. sqlite3 in memory.
db = sqlite3.connect(":memory:")
db.execute("create table t (id integer primary key, word text, n integer, payload blob)")
db.executemany("insert into t (word, n, payload) values (?, ?, ?)",
               ((rng.choice(WORDS), rng.randrange(10000), bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))))
                for _ in range(20000)))
db.execute("create index t_word on t(word)")
db.execute("create index t_n on t(n)")
rows = db.execute("select word, count(*), sum(n), sum(length(payload)) from t group by word order by word").fetchall()
print("sqlite", rows[:4], len(rows))
print("sqlite join", db.execute("select count(*) from t a join t b on a.n = b.n where a.id < b.id").fetchone())
db.close()

# 5. threads, each building and hashing its own data; results in order.
results = [None] * 8
def worker(k):
    r = random.Random(k)
    data = {}
    for i in range(15000):
        key = "%s-%d" % (r.choice(WORDS), r.randrange(5000))
        data.setdefault(key, []).append(i * k)
    big = bytearray(r.randrange(256) for _ in range(200000))   # a larger block
    h = hashlib.sha256()
    for key in sorted(data):
        h.update(key.encode()); h.update(str(sum(data[key])).encode())
    h.update(bytes(big))
    results[k] = h.hexdigest()[:12]
threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print("threads", results)

# 6. big allocations: a large list and a large bytes object.
big = list(range(1000000))
s = sum(x * x for x in big[::7])
payload = b"x" * (8 << 20)
print("big", s, len(payload), len(bytes(payload[::3])))
PYEOF

cat >"$WORK/in/work.pl" <<'PLEOF'
use strict;
use warnings;

my @words = qw(alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho);
my $seed = 42;
sub rnd { $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed; }

# Hash-heavy: counts, nested hashes and arrays.
my (%count, %nested);
my @lines;
for my $i (1 .. 60000) {
    my $line = join(" ", map { $words[rnd() % @words] . (rnd() % 100) } 1 .. (3 + rnd() % 12));
    push @lines, $line;
    for my $w (split / /, $line) {
        $count{$w}++;
        my ($stem, $n) = $w =~ /^([a-z]+)(\d+)$/;
        push @{ $nested{$stem}{ $n % 10 } }, $i;
    }
}
my @top = (sort { $count{$b} <=> $count{$a} || $a cmp $b } keys %count)[0 .. 9];
print "distinct ", scalar(keys %count), " top @top\n";
for my $stem (sort keys %nested) {
    my $tot = 0;
    $tot += scalar(@{ $nested{$stem}{$_} }) for keys %{ $nested{$stem} };
    print "$stem $tot\n";
}

# Regex-heavy: substitutions, captures, transliteration.
my $text = join("\n", @lines);
(my $t2 = $text) =~ s/(\w+?)a(\d+)/<$2:$1>/g;
my $caps = () = $t2 =~ /<(\d+):/g;
(my $t3 = $t2) =~ tr/a-z/A-Z/;
my %lens;
$lens{ length($1) }++ while $t3 =~ /([A-Z]+)/g;
print "caps $caps len ", length($t2), " ", join(",", map { "$_=$lens{$_}" } sort { $a <=> $b } keys %lens), "\n";

# String building and splitting, big and small.
my $big = "";
$big .= sprintf("%08d|%s;", $_, $words[$_ % @words]) for 1 .. 200000;
my @parts = split /;/, $big;
my %rev = map { (split /\|/)[1] => $_ } @parts;
print "big ", length($big), " parts ", scalar(@parts), " rev ", join(",", map { "$_=" . substr($rev{$_}, 0, 8) } sort keys %rev), "\n";
my $sum = 0;
$sum = ($sum * 31 + ord($_)) % 1000000007 for split //, substr($t3, 0, 300000);
print "sum $sum\n";
PLEOF

mkdir -p "$WORK/in/csrc"
cat >"$WORK/in/csrc/table.h" <<'CEOF'
#ifndef TABLE_H
#define TABLE_H
#include <stddef.h>
typedef struct table table;
table *table_new(void);
void table_add(table *t, const char *key, long value);
long table_get(const table *t, const char *key);
size_t table_count(const table *t);
void table_free(table *t);
char **sorted_words(size_t n, unsigned seed);
unsigned long checksum(char **words, size_t n);
#endif
CEOF
cat >"$WORK/in/csrc/table.c" <<'CEOF'
#include <stdlib.h>
#include <string.h>
#include "table.h"
typedef struct node { struct node *next; char *key; long value; } node;
struct table { node **buckets; size_t nbuckets, count; };
static unsigned long hash(const char *s) { unsigned long h = 5381; while (*s) h = h * 33 + (unsigned char)*s++; return h; }
table *table_new(void) {
    table *t = calloc(1, sizeof *t);
    t->nbuckets = 8;
    t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
    return t;
}
static void grow(table *t) {
    size_t nb = t->nbuckets * 2;
    node **b = calloc(nb, sizeof *b);
    for (size_t i = 0; i < t->nbuckets; i++)
        for (node *n = t->buckets[i], *next; n; n = next) {
            next = n->next;
            size_t k = hash(n->key) % nb;
            n->next = b[k]; b[k] = n;
        }
    free(t->buckets);
    t->buckets = b; t->nbuckets = nb;
}
void table_add(table *t, const char *key, long value) {
    size_t k = hash(key) % t->nbuckets;
    for (node *n = t->buckets[k]; n; n = n->next)
        if (!strcmp(n->key, key)) { n->value += value; return; }
    node *n = malloc(sizeof *n);
    n->key = strdup(key); n->value = value;
    n->next = t->buckets[k]; t->buckets[k] = n;
    if (++t->count > t->nbuckets) grow(t);
}
long table_get(const table *t, const char *key) {
    for (node *n = t->buckets[hash(key) % t->nbuckets]; n; n = n->next)
        if (!strcmp(n->key, key)) return n->value;
    return -1;
}
size_t table_count(const table *t) { return t->count; }
void table_free(table *t) {
    for (size_t i = 0; i < t->nbuckets; i++)
        for (node *n = t->buckets[i], *next; n; n = next) { next = n->next; free(n->key); free(n); }
    free(t->buckets); free(t);
}
CEOF
cat >"$WORK/in/csrc/words.c" <<'CEOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "table.h"
static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
char **sorted_words(size_t n, unsigned seed) {
    char **w = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == cap) { cap = cap ? cap * 2 : 4; w = realloc(w, cap * sizeof *w); }
        seed = seed * 1103515245u + 12345u;
        size_t len = 1 + (seed >> 16) % 40;
        w[i] = malloc(len + 1);
        for (size_t j = 0; j < len; j++) { seed = seed * 1103515245u + 12345u; w[i][j] = (char)('a' + (seed >> 16) % 26); }
        w[i][len] = 0;
    }
    qsort(w, n, sizeof *w, cmp);
    return w;
}
unsigned long checksum(char **words, size_t n) {
    unsigned long h = 0;
    for (size_t i = 0; i < n; i++) for (const char *p = words[i]; *p; p++) h = h * 131 + (unsigned char)*p;
    return h;
}
CEOF
cat >"$WORK/in/csrc/main.c" <<'CEOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "table.h"
int main(void) {
    size_t n = 200000;
    char **w = sorted_words(n, 7);
    table *t = table_new();
    for (size_t i = 0; i < n; i++) { char k[4] = { w[i][0], w[i][1] ? w[i][1] : '_', 0 }; table_add(t, k, (long)strlen(w[i])); }
    printf("words %zu checksum %lu first %s last %s\n", n, checksum(w, n), w[0], w[n - 1]);
    printf("keys %zu aa=%ld zz=%ld q_=%ld\n", table_count(t), table_get(t, "aa"), table_get(t, "zz"), table_get(t, "q_"));
    char *big = malloc(16u << 20);
    memset(big, 'x', 16u << 20);
    big = realloc(big, 32u << 20);
    memset(big + (16u << 20), 'y', 16u << 20);
    unsigned long s = 0;
    for (size_t i = 0; i < (32u << 20); i += 4096) s += (unsigned char)big[i];
    printf("big %lu\n", s);
    free(big);
    for (size_t i = 0; i < n; i++) free(w[i]);
    free(w);
    table_free(t);
    return 0;
}
CEOF

# ---------------------------------------------------------------------------
# The apps.  Each runs in its own empty directory (the cwd) with IN set, and
# prints what is compared.  They run under `bash -c`, so with LD_PRELOAD set
# the shell and every tool they start have LIB preloaded.
# ---------------------------------------------------------------------------
app_python3() {
    PYTHONHASHSEED=0 python3 "$IN/work.py"
    # Again with every Python object in malloc (no pymalloc arenas) and random
    # string hashing: the results must not change.
    PYTHONMALLOC=malloc PYTHONHASHSEED=random python3 "$IN/work.py" | sha256sum
}

app_git() {
    export HOME="$PWD/home" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
    export GIT_AUTHOR_NAME="Hak Tester" GIT_AUTHOR_EMAIL="tester@example.invalid"
    export GIT_COMMITTER_NAME="Hak Tester" GIT_COMMITTER_EMAIL="tester@example.invalid"
    export GIT_AUTHOR_DATE="2024-01-01T00:00:00Z" GIT_COMMITTER_DATE="2024-01-01T00:00:00Z"
    mkdir -p home repo && cd repo
    git init -q -b main .
    git config core.pager cat
    for c in 1 2 3 4 5 6; do
        mkdir -p "dir$((c % 3))"
        for f in $(seq 1 40); do
            awk -v c="$c" -v f="$f" 'BEGIN { for (i = 1; i <= 200; i++) printf "line %d of file %d, commit %d, value %d\n", i, f, (i % (c + 1) ? 0 : c), (i * f * 7919) % 1009 }' >"dir$((c % 3))/file$f.txt"
        done
        [ "$c" -eq 3 ] && git rm -q -r dir1
        git add -A
        export GIT_AUTHOR_DATE="2024-01-0${c}T12:00:00Z" GIT_COMMITTER_DATE="2024-01-0${c}T12:00:00Z"
        git commit -q -m "commit $c" -m "body of commit $c"
    done
    git checkout -q -b feature HEAD~2
    mkdir -p feature && seq 1 500 >feature/notes.txt
    git add feature
    git commit -q -m "feature"
    git checkout -q main
    git merge -q --no-edit feature
    echo "uncommitted" >>dir2/file5.txt
    echo "new" >untracked.txt
    git log --stat --format='%H %an %s'
    git status --porcelain=v1
    git diff --stat HEAD~3 HEAD
    git diff | sha256sum
    git diff HEAD~4 HEAD | sha256sum
    git grep -c 'value 7' HEAD -- dir0 | awk 'NR <= 20'
    git gc -q --aggressive
    git fsck --full --strict 2>&1
    git count-objects -v | grep -E '^(count|in-pack|garbage)'
    git log --all --format='%H %s' | sha256sum
    git rev-list --objects --all | sort | sha256sum
}

app_gcc() {
    cp "$IN"/csrc/* .
    for f in table words main; do gcc -O2 -Wall -Wextra -c "$f.c" -o "$f.o"; done
    gcc -O2 -o prog table.o words.o main.o
    ./prog
    # Compiler output must not depend on the allocator.
    sha256sum table.o words.o main.o
    gcc -O1 -g0 -fno-ident -S main.c -o - | sha256sum
}

app_perl() {
    perl "$IN/work.pl"
}

app_sort() {
    awk 'BEGIN { s = 1; for (i = 0; i < 400000; i++) { s = (s * 1103515245 + 12345) % 2147483648; printf "%d %x line-%d\n", s % 100000, s, i } }' >data.txt
    LC_ALL=C sort -S 64M --parallel=2 -k1,1n -k2 data.txt | sha256sum
    LC_ALL=C sort -u -k1,1n data.txt | wc -l
    LC_ALL=C sort -S 1M -T . data.txt | sha256sum   # external merge with temp files
}

export -f "${ALL_APPS[@]/#/app_}"
export IN="$WORK/in"

# ---------------------------------------------------------------------------
# Driver.
# ---------------------------------------------------------------------------
FAILED=0
report() {   # app status [reason]
    if [ "$2" = PASS ]; then
        echo "PASS $1"
    else
        echo "FAIL $1 ($3)"
        FAILED=$((FAILED + 1))
    fi
}

describe_rc() {
    local rc=$1
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "timed out after ${TMO}s"
    elif [ "$rc" -gt 128 ]; then echo "killed by signal $((rc - 128))"
    else echo "exit status $rc"; fi
}

LIB_ABS=""
LIB_PROBLEM=""
if [ ! -f "$LIB" ]; then
    LIB_PROBLEM="library $LIB not found"
else
    LIB_ABS="$(cd "$(dirname "$LIB")" && pwd)/$(basename "$LIB")"
    # Make sure the preload really takes effect, or every comparison is moot.
    probe="$(LD_PRELOAD="$LIB_ABS" cat /proc/self/maps 2>"$WORK/probe.err")"
    if grep -q 'cannot be preloaded' "$WORK/probe.err" || ! grep -qF "$LIB_ABS" <<<"$probe"; then
        LIB_PROBLEM="$LIB cannot be preloaded: $(head -c 200 "$WORK/probe.err" | tr '\n' ' ')"
    fi
fi

for app in "${APPS[@]}"; do
    if ! declare -F "app_$app" >/dev/null; then
        report "$app" FAIL "unknown app"; continue
    fi
    if [ -n "$LIB_PROBLEM" ]; then
        report "$app" FAIL "$LIB_PROBLEM"; continue
    fi
    tool="$app"; [ "$app" = sort ] && tool=sort
    if ! command -v "$tool" >/dev/null 2>&1; then
        report "$app" FAIL "$tool not installed"; continue
    fi
    for mode in ref pre; do
        d="$WORK/$app.$mode"
        mkdir -p "$d/cwd"
        if [ "$mode" = ref ]; then
            (cd "$d/cwd" && timeout -k 10 "$TMO" bash -c "set -eo pipefail; app_$app") \
                >"$d/out" 2>"$d/err"
        else
            (cd "$d/cwd" && LD_PRELOAD="$LIB_ABS" timeout -k 10 "$TMO" bash -c "set -eo pipefail; app_$app") \
                >"$d/out" 2>"$d/err"
        fi
        echo $? >"$d/rc"
    done
    ref_rc=$(cat "$WORK/$app.ref/rc")
    pre_rc=$(cat "$WORK/$app.pre/rc")
    if [ "$ref_rc" -ne 0 ]; then
        report "$app" FAIL "reference run without preload failed: $(describe_rc "$ref_rc"): $(tail -n 2 "$WORK/$app.ref/err" | tr '\n' ' ' | head -c 200)"
    elif [ "$pre_rc" -ne 0 ]; then
        report "$app" FAIL "with preload: $(describe_rc "$pre_rc"); stderr: $(tail -n 3 "$WORK/$app.pre/err" | tr '\n' ' ' | head -c 300)"
    elif grep -q 'cannot be preloaded' "$WORK/$app.pre/err"; then
        report "$app" FAIL "preload did not take effect"
    elif ! cmp -s "$WORK/$app.ref/out" "$WORK/$app.pre/out"; then
        report "$app" FAIL "output differs"
        echo "--- diff (reference vs preload) for $app:" >&2
        diff "$WORK/$app.ref/out" "$WORK/$app.pre/out" | head -n 20 >&2
    else
        report "$app" PASS
    fi
done

[ "$FAILED" -eq 0 ]
