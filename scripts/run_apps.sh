#!/usr/bin/env bash
# Run real programs with and without LD_PRELOAD=LIB and compare what they do.
#
#   scripts/run_apps.sh [LIB...]     LIB defaults to ./libhakmem.so
#
# Every app runs in its own scratch directories: once plainly (the reference)
# and once with each LIB preloaded; its stdout and exit status must be the
# same every time.  Each run is bounded by `timeout` (APP_TIMEOUT seconds,
# default 120).  Prints `PASS app` or `FAIL app (reason)` per app (with
# several LIBs, per app and LIB: `PASS app [libname.so]`) and exits 1 if any
# app failed.  APPS="python3 git" runs only the apps named.
#
# Apps: python3 (dicts, json, re, sqlite3, threads, big blocks), git, gcc,
# perl, sort, make (a parallel build of a generated 33-file C project),
# sqlite3 (the shell, on :memory: and on a db file) and redis (redis-server on
# 127.0.0.1, port 6390..6420, driven by redis-benchmark and checked with
# redis-cli).  scripts/install_deps.sh test installs them; a missing tool is a
# FAIL.  The apps preload a copy of each LIB taken at the start.
set -uo pipefail

LIBS=("$@")
[ "${#LIBS[@]}" -eq 0 ] && LIBS=(./libhakmem.so)
TMO="${APP_TIMEOUT:-120}"
ALL_APPS=(python3 git gcc perl sort make sqlite3 redis)
read -r -a APPS <<<"${APPS:-${ALL_APPS[*]}}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hakmem-apps.XXXXXX")" || { echo "run_apps: mktemp failed" >&2; exit 1; }
[ -n "$WORK" ] && [ -d "$WORK" ] || { echo "run_apps: no work directory" >&2; exit 1; }
cleanup() {
    # A redis-server that outlived its app (the app's own trap normally stops
    # it): recognised by its pid file and its working directory.
    local f pid
    for f in "$WORK"/*/cwd/redis.pid; do
        [ -f "$f" ] || continue
        pid="$(cat "$f")"
        [ -n "$pid" ] && [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$(dirname "$f")/data" ] && kill -9 "$pid" 2>/dev/null
    done
    [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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

# A small C project for a parallel make: 32 modules built into a static
# library, a header that make writes itself ($(file ...)), dependency files
# (-MMD -MP), and a target that fails to compile.
mkdir -p "$WORK/in/mk"
for i in $(seq -w 0 31); do
    extra=""; [ $((10#$i % 4)) -eq 0 ] && extra='#include "extra.h"'
    sed -e "s/NN/$i/g" -e "s|EXTRA_INCLUDE|$extra|" >"$WORK/in/mk/mod$i.c" <<'CEOF'
#include <stdlib.h>
#include <string.h>
#include "common.h"
EXTRA_INCLUDE
#ifndef EXTRA_SALT
#define EXTRA_SALT 0
#endif
struct itemNN { char *name; unsigned long key; };
static int cmpNN(const void *a, const void *b) {
    const struct itemNN *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key ? 1 : strcmp(x->name, y->name);
}
unsigned long modNN(unsigned long seed) {
    size_t n = 300 + 37 * (size_t)(1NN % 100);
    struct itemNN *v = malloc(n * sizeof *v);
    unsigned long h = seed + EXTRA_SALT;
    for (size_t i = 0; i < n; i++) {
        size_t len = 1 + mix(seed + i) % (8 + 4 * (1NN % 10));
        v[i].name = malloc(len + 1);
        for (size_t j = 0; j < len; j++) v[i].name[j] = (char)('a' + mix(seed * 31 + i * 7 + j) % 26);
        v[i].name[len] = 0;
        v[i].key = mix(i * 1NN) % 1000;
    }
    qsort(v, n, sizeof *v, cmpNN);
    for (size_t i = 0; i < n; i++) { h = h * 131 + v[i].key; for (char *p = v[i].name; *p; p++) h = h * 31 + (unsigned char)*p; free(v[i].name); }
    free(v);
    return h;
}
CEOF
done
cat >"$WORK/in/mk/common.h" <<'CEOF'
#ifndef COMMON_H
#define COMMON_H
static inline unsigned long mix(unsigned long x) { x ^= x >> 33; x *= 0xff51afd7ed558ccdUL; x ^= x >> 33; return x; }
#endif
CEOF
cat >"$WORK/in/mk/extra.h" <<'CEOF'
#define EXTRA_SALT 17
CEOF
cat >"$WORK/in/mk/main.c" <<'CEOF'
#include <stdio.h>
#include "funcs.h"
struct mod { const char *name; unsigned long (*fn)(unsigned long); };
#define X(m) { #m, m },
static const struct mod mods[] = { MOD_LIST };
int main(void) {
    unsigned long all = 0;
    for (size_t i = 0; i < sizeof mods / sizeof mods[0]; i++) {
        unsigned long h = mods[i].fn(i + 1);
        all = all * 1000003 + h;
        printf("%s %lu\n", mods[i].name, h);
    }
    printf("modules %zu all %lu\n", sizeof mods / sizeof mods[0], all);
    return 0;
}
CEOF
printf 'int broken(void) { return undeclared_name; }\n' >"$WORK/in/mk/broken.c"
cat >"$WORK/in/mk/Makefile" <<'MKEOF'
CC = gcc
CFLAGS = -O1 -Wall -Wextra -MMD -MP
SRCS := $(sort $(wildcard mod*.c))
MODS := $(SRCS:.c=)
OBJS := $(SRCS:.c=.o)

all: prog

prog: main.o libmods.a
	@echo "LD $@"
	$(CC) -o $@ main.o libmods.a

libmods.a: $(OBJS)
	@echo "AR $@"
	rm -f $@
	ar rcs $@ $(OBJS)

main.o: funcs.h

funcs.h: Makefile
	@echo "GEN $@"
	$(file >$@,/* generated by make */)
	$(foreach m,$(MODS),$(file >>$@,unsigned long $(m)(unsigned long);))
	$(file >>$@,#define MOD_LIST $(foreach m,$(MODS),X($(m))))

%.o: %.c
	@echo "CC $<"
	$(CC) $(CFLAGS) -c $< -o $@

broken: broken.o

clean:
	rm -f prog libmods.a funcs.h *.o *.d

.PHONY: all clean broken
-include $(OBJS:.o=.d) main.d
MKEOF

cat >"$WORK/in/work.sql" <<'SQLEOF'
.bail on
.headers on
PRAGMA cache_size = 200;
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, joined TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                     amount INTEGER, note TEXT);
CREATE TABLE cities (name TEXT PRIMARY KEY, country TEXT) WITHOUT ROWID;
INSERT INTO cities VALUES ('Tokyo', 'JP'), ('Osaka', 'JP'), ('Lyon', 'FR'), ('Porto', 'PT'), ('Quito', 'EC'), ('Perth', 'AU');

WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000)
INSERT INTO customers
SELECT i,
       printf('cust-%05d-%s', i, substr('abcdefghijklmnopqrstuvwxyz', 1 + i % 26, 1 + i % 9)),
       CASE i % 7 WHEN 0 THEN 'Tokyo' WHEN 1 THEN 'Osaka' WHEN 2 THEN 'Lyon' WHEN 3 THEN 'Porto'
                  WHEN 4 THEN 'Quito' WHEN 5 THEN 'Perth' ELSE NULL END,
       date('2024-01-01', '+' || (i * 37 % 366) || ' days')
FROM c;

BEGIN;
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 12000)
INSERT INTO orders
SELECT i, 1 + (i * 7919) % 3000, (i * 104729) % 10007,
       lower(hex(zeroblob(i % 40))) || replace(substr('..............................', 1, i % 30), '.', 'ab')
FROM c;
COMMIT;

BEGIN;
DELETE FROM orders WHERE amount < 5000;
SELECT 'inside rollback' AS phase, count(*) AS n FROM orders;
ROLLBACK;
SELECT 'after rollback' AS phase, count(*) AS n, sum(amount) AS total FROM orders;

CREATE INDEX orders_by_customer ON orders (customer_id, amount);
CREATE INDEX customers_by_city ON customers (city, name);

SELECT c.city, ci.country, count(o.id) AS orders, sum(o.amount) AS total, max(length(o.note)) AS longest
FROM customers c JOIN orders o ON o.customer_id = c.id LEFT JOIN cities ci ON ci.name = c.city
GROUP BY c.city ORDER BY c.city;

SELECT c.id, c.name, sum(o.amount) AS total, count(*) AS n
FROM customers c JOIN orders o ON o.customer_id = c.id
GROUP BY c.id HAVING count(*) >= 4 ORDER BY total DESC, c.id LIMIT 8;

SELECT city, name, total, rnk FROM (
  SELECT c.city, c.name, sum(o.amount) AS total,
         rank() OVER (PARTITION BY c.city ORDER BY sum(o.amount) DESC, c.name) AS rnk
  FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id)
WHERE rnk <= 2 ORDER BY city, rnk;

SELECT upper(substr(name, 12)) AS tail, length(name) AS len, instr(name, '-') AS dash,
       replace(name, 'cust', 'client') AS renamed, trim(substr(name, 1, 5), 'c') AS trimmed,
       printf('%08.2f', id / 7.0) AS fmt
FROM customers WHERE name GLOB '*-ab*' ORDER BY id LIMIT 6;

SELECT count(*) AS like_count FROM customers WHERE name LIKE '%DEF%';
SELECT city, length(group_concat(name, ',')) AS concat_len FROM (SELECT * FROM customers ORDER BY id) GROUP BY city ORDER BY city;
SELECT json_group_array(id) AS ids FROM (SELECT id FROM customers WHERE id % 250 = 0 ORDER BY id);
SELECT json_extract(json_object('a', 1, 'b', json_array(1, 2, 'three')), '$.b[2]') AS j;
SELECT length(replace(hex(zeroblob(400000)), '00', 'xyz')) AS big_string;

UPDATE customers SET name = name || '-vip'
WHERE id IN (SELECT customer_id FROM orders GROUP BY customer_id HAVING sum(amount) > 25000);
SELECT count(*) AS vips FROM customers WHERE name LIKE '%-vip';
DELETE FROM orders WHERE id % 3 = 0;
SELECT note, count(*) AS n FROM orders GROUP BY note ORDER BY n DESC, note LIMIT 3;
SELECT sum(amount * customer_id % 9973) AS checksum FROM orders;
SELECT o.id, c.joined FROM orders o JOIN customers c ON c.id = o.customer_id ORDER BY c.joined DESC, o.amount, o.id LIMIT 5;

WITH RECURSIVE fib(n, a, b) AS (SELECT 1, 0, 1 UNION ALL SELECT n + 1, b, (a + b) % 1000000007 FROM fib WHERE n < 2000)
SELECT max(n) AS n, sum(a) % 1000000007 AS fibsum FROM fib;
PRAGMA integrity_check;
SQLEOF

cat >"$WORK/in/reopen.sql" <<'SQLEOF'
.bail on
SELECT count(*), sum(amount), sum(length(note)) FROM orders;
SELECT name FROM sqlite_schema WHERE type = 'index' ORDER BY name;
VACUUM;
PRAGMA integrity_check;
SELECT city, count(*) FROM customers INDEXED BY customers_by_city WHERE city >= 'O' GROUP BY city ORDER BY city;
SQLEOF

# Values for redis: about 100 KiB and exactly 2 MiB, no newline at the end.
big_value() {   # bytes
    awk -v n="$1" 'BEGIN { for (i = 0; t < n; i++) { x = sprintf("%d,", i * 7919 % 100003); if (t + length(x) > n) x = substr(x, 1, n - t); printf "%s", x; t += length(x) } }'
}
big_value 102400 >"$WORK/in/v100k"
big_value 2097152 >"$WORK/in/v2m"

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

app_make() {
    # make's own output order varies with -j: only the built program's output,
    # the sorted list of what a rebuild redid, and exit statuses are compared.
    cp "$IN"/mk/* .
    make -j4 >make1.log 2>&1 || { cat make1.log >&2; echo "make -j4 failed" >&2; return 1; }
    ./prog
    ar t libmods.a | sort | sha256sum
    make -q && echo "up to date"
    touch extra.h          # only the modules that include it (and what uses them) are rebuilt
    make -j4 >make2.log 2>&1 || { cat make2.log >&2; echo "make -j4 rebuild failed" >&2; return 1; }
    grep -E '^(CC|AR|LD|GEN) ' make2.log | sort
    ./prog | tail -n 1
    local rc=0
    make -j4 -k broken all >make3.log 2>&1 || rc=$?
    echo "make broken: exit status $rc"
    grep -c "undeclared_name" make3.log
    make -j4 clean >/dev/null
    make -j4 -s >make4.log 2>&1 || { cat make4.log >&2; echo "make -j4 after clean failed" >&2; return 1; }
    ./prog | sha256sum
}

app_sqlite3() {
    sqlite3 -batch -init /dev/null :memory: <"$IN/work.sql"
    sqlite3 -batch -init /dev/null test.db <"$IN/work.sql" | sha256sum
    sqlite3 -batch -init /dev/null test.db <"$IN/reopen.sql"
    sqlite3 -batch -init /dev/null test.db .dump | sha256sum
}

app_redis() {
    # One redis-server on 127.0.0.1 (preloaded like everything else in the
    # pre run), driven by redis-benchmark and checked with redis-cli.  The
    # server is bounded by timeout and killed on any way out of this shell.
    # Globals, not locals: the EXIT trap runs after the function is gone.
    port="" tpid="" spid=""
    local p i rc
    redis_stop() {
        local st=$? why
        set +e
        if [ "$st" -ne 0 ] && [ -n "$tpid" ]; then   # failing: say what the server did
            why="$(grep -m 1 -E 'crashed by signal|ASSERTION|Guru Meditation' server.log 2>/dev/null)"
            # A crashing server is still writing its report: let it finish.
            for i in $(seq 1 30); do [ -n "$why" ] && kill -0 "$tpid" 2>/dev/null || break; sleep 0.1; done
            if kill -0 "$tpid" 2>/dev/null; then
                echo "redis-server (pid $spid) still running; ${why:-no crash in its log}" >&2
            else
                wait "$tpid" 2>/dev/null; st=$?
                echo "redis-server (pid $spid) is gone: $([ "$st" -gt 128 ] && echo "signal $((st - 128))" || echo "exit status $st"); ${why:-no crash in its log}" >&2
            fi
        fi
        if [ -n "$tpid" ] && kill -0 "$tpid" 2>/dev/null; then
            kill "$tpid" 2>/dev/null                 # timeout passes the TERM on
            for i in $(seq 1 50); do kill -0 "$tpid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$tpid" 2>/dev/null
        fi
        if [ -n "$spid" ] && [ "$(cat "/proc/$spid/comm" 2>/dev/null)" = redis-server ]; then
            kill -9 "$spid" 2>/dev/null
        fi
        return 0
    }
    trap redis_stop EXIT
    redis_run() {   # port; runs in the background, bounded by timeout
        exec timeout --foreground -k 5 "$APP_TMO" redis-server --port "$1" --bind 127.0.0.1 --save '' \
            --appendonly no --daemonize no --dir "$PWD/data" --logfile '' --io-threads 2 \
            --lazyfree-lazy-user-del yes --lazyfree-lazy-user-flush yes >server.log 2>&1
    }
    mkdir -p data
    for p in $(seq 6390 6420); do
        if command -v ss >/dev/null 2>&1 && [ -n "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]; then continue; fi
        redis_run "$p" &
        tpid=$!
        for i in $(seq 1 100); do
            # Answered, and it is our server (its dir is ours), not another one on the port.
            if [ "$(redis-cli -h 127.0.0.1 -p "$p" ping 2>/dev/null)" = PONG ] &&
               [ "$(redis-cli -h 127.0.0.1 -p "$p" config get dir 2>/dev/null | sed -n 2p)" = "$PWD/data" ]; then
                port=$p; break
            fi
            kill -0 "$tpid" 2>/dev/null || break
            sleep 0.1
        done
        [ -n "$port" ] && break
        redis_stop; tpid=""
        if ! grep -q 'already in use' server.log; then
            echo "redis-server did not start on port $p:" >&2; tail -n 5 server.log >&2; return 1
        fi
    done
    [ -n "$port" ] || { echo "no free port in 6390..6420" >&2; return 1; }
    rcli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
    spid="$(rcli info server | tr -d '\r' | sed -n 's/^process_id://p')"
    echo "$spid" >redis.pid
    if [ -n "${LD_PRELOAD:-}" ] && ! grep -qF "$LD_PRELOAD" "/proc/$spid/maps"; then
        echo "redis-server (pid $spid) does not have $LD_PRELOAD mapped" >&2; return 1
    fi

    redis-benchmark -h 127.0.0.1 -p "$port" -n 20000 -q -t set,get,lpush,lpop,incr -P 16 >bench1.out
    tr '\r' '\n' <bench1.out | grep 'requests per second' | cut -d: -f1
    rcli get 'counter:__rand_int__'
    rcli dbsize
    # Random keys, larger values, more types; then flushed (in a lazyfree thread).
    redis-benchmark -h 127.0.0.1 -p "$port" -n 10000 -r 5000 -d 700 -q -t set,get,hset,sadd,zadd,rpush,lpop -P 8 >bench2.out
    tr '\r' '\n' <bench2.out | grep 'requests per second' | cut -d: -f1
    [ "$(rcli dbsize)" -gt 1000 ] && echo "many keys"
    rcli flushall
    rcli ping

    rcli -x set big1 <"$IN/v100k"
    rcli -x set big2 <"$IN/v2m"
    rcli strlen big1
    rcli strlen big2
    cmp <(rcli get big1) <(cat "$IN/v100k"; echo) && echo "big1 intact"
    cmp <(rcli get big2) <(cat "$IN/v2m"; echo) && echo "big2 intact"
    rcli -x append big2 <"$IN/v2m"
    rcli getrange big2 2097148 2097160
    cmp <(rcli get big2) <(cat "$IN/v2m" "$IN/v2m"; echo) && echo "big2 doubled intact"
    rcli setrange big3 3000000 tail
    rcli strlen big3
    rcli set n 41 >/dev/null
    rcli incr n
    rcli incrby n 1000000
    awk 'BEGIN { for (i = 0; i < 5000; i++) printf "RPUSH biglist item-%d-%s\r\n", i, substr("abcdefghijklmnopqrstuvwxyz", 1, 1 + i % 26) }' |
        rcli --pipe | tail -n 1
    rcli llen biglist
    rcli lrange biglist 0 4
    rcli lrange biglist -3 -1
    rcli lindex biglist 2500
    awk 'BEGIN { for (i = 0; i < 3000; i++) printf "HSET h f%d %d\r\nZADD z %d m%d\r\nSADD s%d e%d\r\n", i, i * i, i * 7 % 1000, i, i % 2, i % 1499 }' |
        rcli --pipe | tail -n 1
    rcli hlen h
    rcli hget h f1234
    rcli zrange z 0 4 withscores
    rcli zcount z 100 200
    rcli sintercard 2 s0 s1
    rcli info memory >/dev/null
    rcli unlink biglist h z
    rcli del big1 big2 big3
    rcli dbsize
    rcli ping

    rcli shutdown nosave || true
    rc=0; wait "$tpid" || rc=$?
    tpid=""
    echo "redis-server exit status $rc"
    [ "$rc" -eq 0 ] || { tail -n 20 server.log >&2; return 1; }
}

export -f "${ALL_APPS[@]/#/app_}"
export IN="$WORK/in" APP_TMO="$TMO"

# ---------------------------------------------------------------------------
# Driver.
# ---------------------------------------------------------------------------
FAILED=0
report() {   # app status [reason]; the lib's name is in LABEL
    if [ "$2" = PASS ]; then
        echo "PASS $1$LABEL"
    else
        echo "FAIL $1$LABEL ($3)"
        FAILED=$((FAILED + 1))
    fi
}

describe_rc() {
    local rc=$1
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "timed out after ${TMO}s"
    elif [ "$rc" -gt 128 ]; then echo "killed by signal $((rc - 128))"
    else echo "exit status $rc"; fi
}

# LIB_ABS[k]: the snapshot of LIBS[k] the apps preload; LIB_PROBLEM[k]: why not.
LIB_ABS=() LIB_PROBLEM=() LIB_LABEL=()
for k in "${!LIBS[@]}"; do
    LIB="${LIBS[$k]}" abs="" problem=""
    if [ ! -f "$LIB" ]; then
        problem="library $LIB not found"
    else
        # Run a snapshot: a rebuild of LIB during the run must not change (or
        # briefly remove) the library that the apps preload.
        abs="$WORK/lib$k/$(basename "$LIB")"
        mkdir -p "$WORK/lib$k" && cp "$LIB" "$abs" || problem="cannot copy $LIB"
    fi
    if [ -z "$problem" ]; then
        # Make sure the preload really takes effect, or every comparison is moot.
        probe="$(LD_PRELOAD="$abs" cat /proc/self/maps 2>"$WORK/probe.err")"
        if grep -q 'cannot be preloaded' "$WORK/probe.err" || ! grep -qF "$abs" <<<"$probe"; then
            problem="$LIB cannot be preloaded: $(head -c 200 "$WORK/probe.err" | tr '\n' ' ')"
        fi
    fi
    LIB_ABS+=("$abs") LIB_PROBLEM+=("$problem") LIB_LABEL+=("")
    [ "${#LIBS[@]}" -gt 1 ] && LIB_LABEL[k]=" [$(basename "$LIB")]"
done

for app in "${APPS[@]}"; do
    LABEL=""
    if ! declare -F "app_$app" >/dev/null; then
        report "$app" FAIL "unknown app"; continue
    fi
    case "$app" in
        make)  tools="make gcc ar" ;;
        redis) tools="redis-server redis-cli redis-benchmark timeout" ;;
        *)     tools="$app" ;;
    esac
    missing=""
    for tool in $tools; do command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"; done
    if [ -n "$missing" ]; then
        for k in "${!LIBS[@]}"; do
            LABEL="${LIB_LABEL[$k]}"
            report "$app" FAIL "not installed:$missing (scripts/install_deps.sh test installs it)"
        done
        continue
    fi
    # The reference once, then each library against it.
    d="$WORK/$app.ref"
    mkdir -p "$d/cwd"
    (cd "$d/cwd" && timeout -k 10 "$TMO" bash -c "set -eo pipefail; app_$app") >"$d/out" 2>"$d/err"
    ref_rc=$?
    for k in "${!LIBS[@]}"; do
        LABEL="${LIB_LABEL[$k]}"
        if [ -n "${LIB_PROBLEM[$k]}" ]; then
            report "$app" FAIL "${LIB_PROBLEM[$k]}"; continue
        fi
        d="$WORK/$app.pre$k"
        mkdir -p "$d/cwd"
        (cd "$d/cwd" && LD_PRELOAD="${LIB_ABS[$k]}" timeout -k 10 "$TMO" bash -c "set -eo pipefail; app_$app") \
            >"$d/out" 2>"$d/err"
        pre_rc=$?
        if [ "$ref_rc" -ne 0 ]; then
            report "$app" FAIL "reference run without preload failed: $(describe_rc "$ref_rc"): $(tail -n 2 "$WORK/$app.ref/err" | tr '\n' ' ' | head -c 200)"
        elif [ "$pre_rc" -ne 0 ]; then
            report "$app" FAIL "with preload: $(describe_rc "$pre_rc"); stderr: $(tail -n 3 "$d/err" | tr '\n' ' ' | head -c 300)"
        elif grep -q 'cannot be preloaded' "$d/err"; then
            report "$app" FAIL "preload did not take effect"
        elif ! cmp -s "$WORK/$app.ref/out" "$d/out"; then
            report "$app" FAIL "output differs"
            echo "--- diff (reference vs preload of ${LIBS[$k]}) for $app:" >&2
            diff "$WORK/$app.ref/out" "$d/out" | head -n 20 >&2
        else
            report "$app" PASS
        fi
    done
done

[ "$FAILED" -eq 0 ]
