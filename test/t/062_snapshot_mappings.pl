# snapshot => 'v1' through every mapping kind (docs: src/snapshot.c).
#
# Each sink starts with a few thousand EXISTING source rows (NULLs, and
# values over 2 kB stored out of line: STORAGE EXTERNAL), and a seeded
# workload of source writes (inserts, updates of plain and out-of-line
# columns, deletes, primary-key changes, tenant relocations where there is a
# tenant) runs right after ash_replicant_start, concurrently with the copy.
#
#   sa  attribute tenancy (tenant column, REPLICA IDENTITY FULL): mirror equals
#       source, per tenant too; a destination audit on (tenant, id) shows no
#       key inserted twice, and every row the workload did not touch written
#       exactly once
#   sc  context tenancy (schema per tenant, one of them "Initech Ltd"): each
#       tenant schema's table equals the source rows of that tenant, the
#       template table receives nothing
#   se  an encrypted sensitive column (pan, some NULL, some > 2 kB, updates
#       that leave it unchanged): the destination holds format-1 ciphertext,
#       ash_replicant_decrypt of every row equals the source plaintext, the
#       plaintext appears nowhere in the stored row (neither its bytes inside
#       the ciphertext, nor its text, nor its hex), and in no destination log
#   sh  SCD2 history, exact (a source audit of every change with the commit
#       LSN of its transaction from pg_walinspect, on top of the rows that
#       existed): every existing row got exactly one open version from the
#       copy, valid from snapshot_lsn - 1; later updates closed it and opened
#       the next (valid from the update's commit, above the copy's); deletes
#       closed it
#   sl  append log (initial_state snapshot): one event per existing row
#       (operation snapshot, origin snapshot, commit_lsn snapshot_lsn - 1,
#       ordinals 1..N, one non-NULL snapshot_attempt shared by all and equal to
#       the checkpoint's), then exactly the stream events of the workload
#       (origin stream, no attempt), nothing twice
#   sh2, sl2  the same with 30,000 rows, stopped in the middle of the copy
#       and written to before, while stopped, and during and after the second
#       copy: the table is re-copied under a later snapshot F, the copy holds
#       the state of every commit below F (at F - 1), the stream exactly the
#       commits at or after F
#   sk  kill -9 of the destination in the middle of the copy of a 300,000-row
#       table: nothing of the interrupted copy stays, the table is re-copied
#       under a later snapshot, mirror equals source, and a destination
#       audit shows no key inserted twice, every untouched row written
#       exactly once, and no changed key written more often than the copy
#       and the changes committed after its snapshot allow
#
# The copies are fast (300,000 rows in well under a second): where a test
# must act in the middle of one, a destination trigger (a "brake") sleeps on
# every n-th copied row until the test releases it.
# For sh/sl the workload starts after ash_replicant_wait_for_slot (its
# transactions commit after the snapshot point, so their expected effect is
# exact); for the others it starts right after ash_replicant_start and may
# race the slot's creation (then the copy holds it).  The other sinks live
# through sk's crash and still stream afterwards.
# Seed: ASH_SEED (default: time), printed.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $seed = (defined $ENV{ASH_SEED} && $ENV{ASH_SEED} =~ /^\d+$/) ? $ENV{ASH_SEED} : (time() ^ $$) % 1_000_000;
srand($seed);
diag "seed $seed (rerun with ASH_SEED=$seed)";

my $DB = $AshTest::DB;
my $NROWS = 3000;
my $t0 = time;

my ($src, $dst) = AshTest::start_pair(dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', 'message_digest 1 ' . AshTenancy::key_hex(9),
	'column_encryption 1 ' . AshTenancy::key_hex(1));

my $V1 = "go_forward_only => false, snapshot => 'v1'";
my ($sysid, $sdb) = AshTest::source_identity($src);
my $conn = AshTest::conninfo($src);

sub stamp { my ($what) = @_; note sprintf('%s at %.1fs', $what, time - $t0); }

# ---------------------------------------------------------------------------
# Seeded workload
# ---------------------------------------------------------------------------
# gen_workload(%o) -> array ref of $o{xacts} source transactions (scripts)
#   ids     existing keys; next: first new key
#   touched hash ref: filled with every key the workload names
#   ins/upd/del  sub($id) -> SQL; pk: sub($old, $new) -> SQL
#   big     sub($id) -> SQL updating an out-of-line column (optional)
#   extra   [ sub($id) -> SQL ] other updates, e.g. a tenant relocation
# Every kind is forced once in the first transactions, the rest is random.
sub gen_workload
{
	my (%o) = @_;
	my %live = map { $_ => 1 } @{ $o{ids} };
	my $next = $o{next};
	my @extra = @{ $o{extra} // [] };
	my @forced = ('pk', 'upd', 'del', 'ins', 'pk', ($o{big} ? 'big' : ()), map { "x$_" } 0 .. $#extra);
	my @xacts;
	my %n;
	my $touched = $o{touched} // {};
	for my $x (1 .. $o{xacts})
	{
		my @s;
		for my $k (1 .. 1 + int(rand(4)))
		{
			my @l = sort { $a <=> $b } keys %live;
			my $pick = $l[ int(rand(@l)) ];
			my $kind = shift @forced;
			unless ($kind)
			{
				my $r = rand();
				$kind = $r < 0.25 ? 'ins' : $r < 0.55 ? 'upd' : $r < 0.65 ? 'big'
				  : $r < 0.8 ? 'del' : $r < 0.88 ? 'pk' : @extra ? 'x' . int(rand(@extra)) : 'upd';
				$kind = 'upd' if $kind eq 'big' && !$o{big};
			}
			$n{ $kind =~ /^x/ ? 'extra' : $kind }++;
			$touched->{$pick} = 1;
			if ($kind eq 'ins')
			{
				my $id = $next++;
				$touched->{$id} = 1;
				push @s, $o{ins}->($id);
				$live{$id} = 1;
			}
			elsif ($kind eq 'upd') { push @s, $o{upd}->($pick); }
			elsif ($kind eq 'big') { push @s, $o{big}->($pick); }
			elsif ($kind eq 'del') { push @s, $o{del}->($pick); delete $live{$pick}; }
			elsif ($kind eq 'pk')
			{
				my $to = $next++;
				$touched->{$to} = 1;
				push @s, $o{pk}->($pick, $to);
				delete $live{$pick};
				$live{$to} = 1;
			}
			else { push @s, $extra[ substr($kind, 1) ]->($pick); }
		}
		push @xacts, "BEGIN;\n" . join(";\n", @s) . ";\nCOMMIT;\n" . (rand() < 0.4 ? "SELECT pg_sleep(0.01);\n" : '');
	}
	note 'workload: ' . join(', ', map { "$_=$n{$_}" } sort keys %n);
	return \@xacts;
}

# run transactions (array ref, or a slice [from, to] of it) in a background psql
sub run_workload
{
	my ($xacts, $from, $to) = @_;
	$from //= 0;
	$to //= $#$xacts;
	return AshTest::start_workload($src, join('', @$xacts[ $from .. $to ]), timeout => 120);
}

# a value over 2 kB, distinct per key and version
sub big_sql { my ($e) = @_; return "repeat(md5($e), 80)"; }

sub wait_slot
{
	my ($sink) = @_;
	my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_wait_for_slot('$sink')");
	is($rc, 0, "$sink: wait_for_slot returned") or diag $err;
}

sub snapshot_lsn_bigint
{
	my ($sink) = @_;
	return $dst->safe_psql($DB, AshTest::checkpoint_sql($sink, "(c.snapshot_lsn - '0/0'::pg_lsn)::bigint"));
}

sub snapshot_complete
{
	my ($sink, $tables) = @_;
	my $st = AshTest::stat_row($dst, $sink) // {};
	is(($st->{snapshot_phase} // '(null)') . ' ' . ($st->{snapshot_tables_copied} // '-') . '/'
		  . ($st->{snapshot_tables_total} // '-'),
		"complete $tables/$tables", "$sink: stat_pipelines shows the snapshot complete");
	is($dst->safe_psql($DB, "SELECT count(*) FROM ash_replicant.stat_snapshot_tables WHERE sink_name = '$sink' AND state <> 'copied'"),
		'0', "$sink: every table of stat_snapshot_tables copied");
}

# sa: attribute tenancy
# ===========================================================================
stamp('sa');
$src->safe_psql($DB, qq{
CREATE TABLE acc (tenant text NOT NULL, id integer NOT NULL, name text, big text, n integer,
	PRIMARY KEY (tenant, id));
ALTER TABLE acc REPLICA IDENTITY FULL;
ALTER TABLE acc ALTER COLUMN big SET STORAGE EXTERNAL;
INSERT INTO acc SELECT (ARRAY['acme','globex','initech'])[g % 3 + 1], g,
	CASE WHEN g % 11 = 0 THEN NULL ELSE 'name ' || g END,
	CASE WHEN g % 100 = 0 THEN @{[ big_sql("g::text") ]} WHEN g % 13 = 0 THEN NULL ELSE 'b' || g END,
	CASE WHEN g % 7 = 0 THEN NULL ELSE g END
	FROM generate_series(1, $NROWS) g;
CREATE PUBLICATION pub_sa FOR TABLE acc;
});
ok($src->safe_psql($DB, "SELECT count(*) FROM acc WHERE pg_column_size(big) > 2048") >= 30,
	'sa: the source holds out-of-line values over 2 kB');
$dst->safe_psql($DB, q{
CREATE TABLE acc (tenant text NOT NULL, id integer NOT NULL, name text, big text, n integer,
	PRIMARY KEY (tenant, id));
CREATE TABLE acc_audit (tenant text, id integer, op text);
CREATE FUNCTION acc_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO acc_audit VALUES (NEW.tenant, NEW.id, TG_OP);
	RETURN NULL;
END $$;
CREATE TRIGGER acc_audit AFTER INSERT OR UPDATE ON acc FOR EACH ROW EXECUTE FUNCTION acc_audit_fn();
});
my %touched_sa;
my $wl_sa = gen_workload(xacts => 40, ids => [ 1 .. $NROWS ], next => 10001, touched => \%touched_sa,
	ins => sub { my ($i) = @_; "INSERT INTO acc VALUES ((ARRAY['acme','globex','initech'])[$i % 3 + 1], $i, 'new $i', "
		  . ($i % 2 ? big_sql("'$i'") : 'NULL') . ", $i)" },
	upd => sub { my ($i) = @_; "UPDATE acc SET name = coalesce(name, '') || '+', n = NULL WHERE id = $i" },
	big => sub { my ($i) = @_; "UPDATE acc SET big = " . big_sql("'u$i' || random()") . " WHERE id = $i" },
	del => sub { my ($i) = @_; "DELETE FROM acc WHERE id = $i" },
	pk  => sub { my ($i, $to) = @_; "UPDATE acc SET id = $to WHERE id = $i" },
	extra => [ sub { my ($i) = @_; "UPDATE acc SET tenant = CASE tenant WHEN 'acme' THEN 'globex' WHEN 'globex' THEN 'initech' ELSE 'acme' END WHERE id = $i" } ]);

AshTest::setup_pipeline($src, $dst, sink => 'sa', publication => 'pub_sa', pipeline_extra => $V1,
	maps => [ [ 'acc', tenant_column => 'tenant', tenant_strategy => 'attribute' ] ]);
my $w = run_workload($wl_sa);
ok(AshTest::finish_workload($w), 'sa: concurrent source writes done');
AshTest::wait_caught_up($src, $dst, 'sa', name => 'sa: caught up after the snapshot');
AshTest::assert_mirror_equal($src, $dst, ['acc'], name => 'sa: attribute tenancy');
for my $t (qw(acme globex initech))
{
	AshTenancy::assert_same($src, 'acc', "tenant = '$t'", $dst, 'acc', "sa: rows of tenant $t",
		dst_where => "tenant = '$t'", order_by => 'id');
}
is($dst->safe_psql($DB, "SELECT count(*) FROM (SELECT 1 FROM acc_audit WHERE op = 'INSERT' GROUP BY tenant, id HAVING count(*) > 1) x"),
	'0', 'sa: no (tenant, id) inserted twice');
{
	my $untouched = "id <> ALL ('{" . join(',', sort { $a <=> $b } keys %touched_sa) . "}'::integer[])";
	is($dst->safe_psql($DB, "SELECT count(*) || ' ' || count(*) FILTER (WHERE n = 1 AND ins) FROM"
			  . " (SELECT id, count(*) AS n, bool_and(op = 'INSERT') AS ins FROM acc_audit WHERE $untouched GROUP BY id) x"),
		$NROWS - grep({ $_ <= $NROWS } keys %touched_sa) . ' ' . ($NROWS - grep({ $_ <= $NROWS } keys %touched_sa)),
		'sa: every row the workload did not touch was written exactly once, by one insert');
}
snapshot_complete('sa', 2);

# ===========================================================================
# sc: context tenancy (schema per tenant)
# ===========================================================================
stamp('sc');
my @ctx_tenants = ('acme', 'globex', 'Initech Ltd');
$src->safe_psql($DB, qq{
CREATE TABLE docs (id integer PRIMARY KEY, tenant text NOT NULL, title text, body text);
ALTER TABLE docs REPLICA IDENTITY FULL;
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
INSERT INTO docs SELECT g, (ARRAY['acme','globex','Initech Ltd'])[g % 3 + 1],
	CASE WHEN g % 9 = 0 THEN NULL ELSE 'title ' || g END,
	CASE WHEN g % 100 = 1 THEN @{[ big_sql("'d' || g") ]} WHEN g % 5 = 0 THEN NULL ELSE 'body ' || g END
	FROM generate_series(1, $NROWS) g;
CREATE PUBLICATION pub_sc FOR TABLE docs;
});
$dst->safe_psql($DB, q{
CREATE TABLE docs (id integer PRIMARY KEY, tenant text NOT NULL, title text, body text);
CREATE SCHEMA acme;
CREATE SCHEMA globex;
CREATE SCHEMA "Initech Ltd";
CREATE TABLE acme.docs (LIKE public.docs INCLUDING ALL);
CREATE TABLE globex.docs (LIKE public.docs INCLUDING ALL);
CREATE TABLE "Initech Ltd".docs (LIKE public.docs INCLUDING ALL);
});
my $wl_sc = gen_workload(xacts => 40, ids => [ 1 .. $NROWS ], next => 10001,
	ins => sub { my ($i) = @_; "INSERT INTO docs VALUES ($i, (ARRAY['acme','globex','Initech Ltd'])[$i % 3 + 1], NULL, "
		  . ($i % 2 ? big_sql("'n$i'") : "'short $i'") . ")" },
	upd => sub { my ($i) = @_; "UPDATE docs SET title = coalesce(title, 'was null') || ' (edited)' WHERE id = $i" },
	big => sub { my ($i) = @_; "UPDATE docs SET body = " . big_sql("'u$i' || random()") . " WHERE id = $i" },
	del => sub { my ($i) = @_; "DELETE FROM docs WHERE id = $i" },
	pk  => sub { my ($i, $to) = @_; "UPDATE docs SET id = $to WHERE id = $i" },
	extra => [ sub { my ($i) = @_; "UPDATE docs SET tenant = CASE tenant WHEN 'acme' THEN 'Initech Ltd' WHEN 'globex' THEN 'acme' ELSE 'globex' END WHERE id = $i" } ]);

AshTest::setup_pipeline($src, $dst, sink => 'sc', publication => 'pub_sc', pipeline_extra => $V1,
	maps => [ [ 'docs', tenant_column => 'tenant', tenant_strategy => 'context' ] ]);
$w = run_workload($wl_sc);
ok(AshTest::finish_workload($w), 'sc: concurrent source writes done');
AshTest::wait_caught_up($src, $dst, 'sc', name => 'sc: caught up after the snapshot');
for my $t (@ctx_tenants)
{
	(my $q = $t) =~ s/"/""/g;
	AshTenancy::assert_same($src, 'docs', 'tenant = ' . AshTest::lit($t), $dst, qq{"$q".docs},
		"sc: $t.docs equals the source rows of tenant $t");
}
is($dst->safe_psql($DB, 'SELECT count(*) FROM public.docs'), '0', 'sc: the template table receives nothing');
is($dst->safe_psql($DB, q{SELECT (SELECT count(*) FROM acme.docs) + (SELECT count(*) FROM globex.docs) + (SELECT count(*) FROM "Initech Ltd".docs)}),
	$src->safe_psql($DB, 'SELECT count(*) FROM docs'), 'sc: every source row is in exactly one tenant table');
snapshot_complete('sc', 2);

# ===========================================================================
# se: encrypted sensitive column
# ===========================================================================
stamp('se');
# plaintexts: card numbers derived from the key; some NULL; some over 2 kB
my $pan_expr = sub {
	my ($e) = @_;
	return "CASE WHEN $e % 17 = 0 THEN NULL WHEN $e % 250 = 0 THEN repeat('PAN-' || $e || '-', 400)"
	  . " ELSE '4111 1111 1111 ' || lpad(($e)::text, 4, '0') END";
};
$src->safe_psql($DB, qq{
CREATE TABLE cards (id integer PRIMARY KEY, holder text, pan text, note text);
ALTER TABLE cards ALTER COLUMN pan SET STORAGE EXTERNAL;
INSERT INTO cards SELECT g, 'holder ' || g, @{[ $pan_expr->('g') ]}, CASE WHEN g % 4 = 0 THEN NULL ELSE 'n' || g END
	FROM generate_series(1, $NROWS) g;
CREATE PUBLICATION pub_se FOR TABLE cards;
});
$dst->safe_psql($DB, q{
CREATE TABLE cards (id integer PRIMARY KEY, holder text, pan bytea, note text);
CREATE ROLE reader LOGIN;
GRANT ash_replicant_decrypt TO reader;
GRANT SELECT ON cards TO reader;
});
my $wl_se = gen_workload(xacts => 40, ids => [ 1 .. $NROWS ], next => 5001,
	ins => sub { my ($i) = @_; "INSERT INTO cards VALUES ($i, 'holder $i', " . $pan_expr->($i) . ", 'new')" },
	# holder only: the out-of-line pan is unchanged ('u' in the stream)
	upd => sub { my ($i) = @_; "UPDATE cards SET holder = holder || '+' WHERE id = $i" },
	big => sub { my ($i) = @_; "UPDATE cards SET pan = '5500 0000 ' || lpad(($i)::text, 4, '0') || ' ' || lpad((id % 97)::text, 4, '0') WHERE id = $i" },
	del => sub { my ($i) = @_; "DELETE FROM cards WHERE id = $i" },
	pk  => sub { my ($i, $to) = @_; "UPDATE cards SET id = $to WHERE id = $i" },
	extra => [ sub { my ($i) = @_; "UPDATE cards SET pan = NULL WHERE id = $i" } ]);

AshTest::setup_pipeline($src, $dst, sink => 'se', publication => 'pub_se', pipeline_extra => $V1,
	maps => [ [ 'cards', sensitive => ['pan'], encrypted => ['pan'] ] ]);
$w = run_workload($wl_se);
ok(AshTest::finish_workload($w), 'se: concurrent source writes done');
AshTest::wait_caught_up($src, $dst, 'se', name => 'se: caught up after the snapshot');

my $dec = q{ash_replicant_decrypt(t.pan, 'public.cards', 'pan')};
is($dst->safe_psql($DB, qq{SET ROLE reader; SELECT md5(string_agg(row(t.id, t.holder, $dec, t.note)::text, E'\\n' ORDER BY t.id)) || ' ' || count(*) FROM cards t}),
	$src->safe_psql($DB, q{SELECT md5(string_agg(row(t.id, t.holder, t.pan, t.note)::text, E'\n' ORDER BY t.id)) || ' ' || count(*) FROM cards t}),
	'se: ash_replicant_decrypt of every row equals the source plaintext');
is($dst->safe_psql($DB, 'SELECT count(*) FROM cards WHERE pan IS NULL'),
	$src->safe_psql($DB, 'SELECT count(*) FROM cards WHERE pan IS NULL'), 'se: NULLs stay NULL');
ok($dst->safe_psql($DB, 'SELECT count(*) FROM cards WHERE octet_length(pan) > 2048') >= 5,
	'se: values over 2 kB were encrypted too');
is($dst->safe_psql($DB, qq{SET ROLE reader; SELECT count(*) FROM cards t WHERE t.pan IS NOT NULL AND NOT (
	get_byte(t.pan, 0) = 1 AND substr(t.pan, 2, 4) = '\\x00000001'::bytea
	AND octet_length(t.pan) = octet_length(convert_to($dec, 'UTF8')) + 33)}),
	'0', 'se: every stored value is a format-1, key-version-1 ciphertext (plaintext + 33 bytes)');
is($dst->safe_psql($DB, qq{SET ROLE reader; SELECT count(*) FROM cards t WHERE t.pan IS NOT NULL AND (
	position(convert_to($dec, 'UTF8') in t.pan) > 0 OR strpos(t::text, $dec) > 0
	OR strpos(t::text, encode(convert_to($dec, 'UTF8'), 'hex')) > 0)}),
	'0', 'se: the plaintext appears nowhere in the stored row (bytes, text or hex)');
is($dst->safe_psql($DB, q{SELECT count(*) FROM cards WHERE pan IS NOT NULL AND (
	strpos(encode(pan, 'escape'), '4111 1111') > 0 OR strpos(encode(pan, 'escape'), '5500 0000') > 0
	OR strpos(encode(pan, 'escape'), 'PAN-') > 0)}),
	'0', 'se: no card-number prefix inside any ciphertext');
{
	my @plain = split /\n/, $src->safe_psql($DB, q{SELECT pan FROM cards WHERE pan IS NOT NULL AND length(pan) < 100 ORDER BY id LIMIT 40});
	my @hits = map { AshTest::grep_logs_for($_, $dst) } @plain;
	ok(@plain >= 20 && !@hits, 'se: no plaintext in the destination log')
	  or diag join("\n", @hits[ 0 .. ($#hits < 4 ? $#hits : 4) ]);
}
snapshot_complete('se', 2);

# ===========================================================================
# sh, sh2: SCD2 history; sl, sl2: append log (initial_state snapshot)
# ===========================================================================
# Both with an exact expectation from a SOURCE audit of every change and the
# commit LSN of each transaction (pg_walinspect), on top of the state the
# source had before the start (snap_<table>).  The copy of a table happens
# at position F (snapshot_tables.snapshot_lsn): it holds the state of every
# commit below F, at F - 1; the stream applies the commits at or after F.
# sh/sl copy once, at the slot's snapshot (F = the checkpoint's
# snapshot_lsn); sh2/sl2 are stopped in the middle of their copy (a brake
# trigger holds it: a second every 250 rows, two minutes for the table, so
# the copy cannot end before a loaded machine lets this script see it under
# way; released once the second copy is seen), written to while stopped and
# while copying again: their
# table is re-copied under a later snapshot, F > snapshot_lsn, and the stream
# skips the commits in between (the floor).

# a brake on a destination table: every $every-th row sleeps $ms until released
sub brake_sql
{
	my ($table, $every, $ms) = @_;
	return qq{
CREATE TABLE IF NOT EXISTS brake_$table (ms integer NOT NULL);
INSERT INTO brake_$table VALUES ($ms);
CREATE FUNCTION brake_${table}_fn() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	PERFORM pg_sleep(ms / 1000.0) FROM brake_$table;
	RETURN NULL;
END \$\$;
CREATE TRIGGER brake AFTER INSERT ON $table FOR EACH ROW WHEN (NEW.id % $every = 0) EXECUTE FUNCTION brake_${table}_fn();
};
}

# Start the sink's workload around its copy.  Without restart: all of it
# after wait_for_slot.  With restart: a third while the copy runs, the copy
# stopped in the middle, a third while stopped, the brake released, started
# again, the rest while the table is copied anew.
sub drive
{
	my (%o) = @_;
	my ($sink, $table, $xacts) = @o{qw(sink table xacts)};
	wait_slot($sink);
	my $wal_from = $src->safe_psql($DB, 'SELECT pg_current_wal_lsn()');
	if (!$o{restart})
	{
		my $w = run_workload($xacts);
		ok(AshTest::finish_workload($w), "$sink: source writes after the slot done");
	}
	else
	{
		my $third = int(@$xacts / 3);
		my $w = run_workload($xacts, 0, $third - 1);
		ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM ash_replicant.stat_snapshot_tables WHERE sink_name = '$sink'"
				  . " AND source_table = '$table' AND state = 'copying' AND rows_copied > 0", 't', timeout => 60),
			"$sink: the copy of $table is under way");
		AshTest::stop_settled($src, $dst, $sink);
		ok(AshTest::finish_workload($w), "$sink: writes during the first copy done");
		is($dst->safe_psql($DB, "SELECT state FROM ash_replicant.stat_snapshot_tables WHERE sink_name = '$sink' AND source_table = '$table'"),
			'pending', "$sink: stopped in the middle of the copy of $table");
		$w = run_workload($xacts, $third, 2 * $third - 1);
		ok(AshTest::finish_workload($w), "$sink: writes while stopped done");
		AshTest::start_sink($dst, $sink);
		# the second copy under way: its snapshot is taken, what follows is streamed
		ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM ash_replicant.stat_snapshot_tables WHERE sink_name = '$sink'"
				  . " AND source_table = '$table' AND state = 'copying' AND rows_copied > 0", 't', timeout => 60),
			"$sink: the second copy of $table is under way");
		$w = run_workload($xacts, 2 * $third);
		$dst->safe_psql($DB, "UPDATE brake_$o{target} SET ms = 0");
		ok(AshTest::finish_workload($w), "$sink: writes during and after the second copy done");
	}
	AshTest::wait_caught_up($src, $dst, $sink, name => "$sink: caught up after the snapshot", timeout => 120);

	my $S = snapshot_lsn_bigint($sink);
	ok($S =~ /^\d+$/ && $S > 0, "$sink: the checkpoint records the snapshot position ($S)");
	my $F = $dst->safe_psql($DB, "SELECT (snapshot_lsn - '0/0'::pg_lsn)::bigint FROM ash_replicant.snapshot_tables"
		  . " WHERE slot_name = '$sink' AND source_table = '$table' AND state = 'copied'");
	if ($o{restart})
	{
		ok($F =~ /^\d+$/ && $F > $S, "$sink: $table re-copied under a later snapshot ($F > $S)");
		ok($src->safe_psql($DB, qq{SELECT count(*) FROM pg_get_wal_records_info('$wal_from', pg_current_wal_flush_lsn())
			WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT' AND start_lsn >= '$wal_from' AND (start_lsn - '0/0'::pg_lsn) BETWEEN $S AND $F}) > 0,
			"$sink: source transactions committed between the slot and the second copy (the floor matters)");
	}
	else
	{
		is($F, $S, "$sink: $table copied at the slot's snapshot position");
	}
	return ($wal_from, $S, $F);
}

sub scd2_case
{
	my (%o) = @_;
	my ($sink, $t, $n) = @o{qw(sink table rows)};
	stamp($sink);
	my $h = "${t}_hist";
	$src->safe_psql($DB, qq{
CREATE TABLE $t (id integer PRIMARY KEY, grp integer, val text, big text);
ALTER TABLE $t ALTER COLUMN big SET STORAGE EXTERNAL;
INSERT INTO $t SELECT g, CASE WHEN g % 6 = 0 THEN NULL ELSE g % 10 END, 'v' || g,
	CASE WHEN g % 100 = 3 THEN @{[ big_sql("'h' || g") ]} WHEN g % 8 = 0 THEN NULL ELSE 'small' END
	FROM generate_series(1, $n) g;
CREATE PUBLICATION pub_$sink FOR TABLE $t;
-- the state before the start (no write happens before the slot's snapshot)
CREATE TABLE snap_$t AS SELECT id::text AS key, md5(row(grp, val, big)::text) AS img FROM $t;
CREATE TABLE audit_$t (seq bigserial PRIMARY KEY, key text, xid text, op text, img text);
CREATE FUNCTION audit_${t}_fn() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.id <> NEW.id) THEN
		INSERT INTO audit_$t (key, xid, op) VALUES (OLD.id::text, pg_current_xact_id()::text, 'D');
	END IF;
	IF TG_OP IN ('INSERT', 'UPDATE') THEN
		INSERT INTO audit_$t (key, xid, op, img)
		VALUES (NEW.id::text, pg_current_xact_id()::text, 'U', md5(row(NEW.grp, NEW.val, NEW.big)::text));
	END IF;
	RETURN NULL;
END \$\$;
CREATE TRIGGER audit_$t AFTER INSERT OR UPDATE OR DELETE ON $t FOR EACH ROW EXECUTE FUNCTION audit_${t}_fn();
});
	$dst->safe_psql($DB, qq{
CREATE TABLE $h (
	version_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id integer NOT NULL, grp integer, val text, big text,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint,
	UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX ${h}_open ON $h (id) WHERE valid_to_lsn IS NULL;
} . ($o{restart} ? brake_sql($h, 250, 1000) : ''));
	my $xacts = gen_workload(xacts => 60, ids => [ 1 .. $n ], next => $n + 10001,
		ins => sub { my ($i) = @_; "INSERT INTO $t VALUES ($i, NULL, 'new $i', " . big_sql("'i$i'") . ")" },
		# big unchanged: the new version takes it from the version it closes
		upd => sub { my ($i) = @_; "UPDATE $t SET val = md5(val), grp = coalesce(grp, 0) + 1 WHERE id = $i" },
		big => sub { my ($i) = @_; "UPDATE $t SET big = " . big_sql("'b$i' || random()") . " WHERE id = $i" },
		del => sub { my ($i) = @_; "DELETE FROM $t WHERE id = $i" },
		pk  => sub { my ($i, $to) = @_; "UPDATE $t SET id = $to WHERE id = $i" },
		extra => [ sub { my ($i) = @_; "UPDATE $t SET val = 'twice', grp = NULL WHERE id = $i; UPDATE $t SET val = 'three times' WHERE id = $i" } ]);

	AshTest::setup_pipeline($src, $dst, sink => $sink, publication => "pub_$sink", pipeline_extra => $V1,
		maps => [ [ $h, source_table => $t, history_strategy => 'scd2', history_business_key => ['id'] ] ]);
	my ($wal_from, $S, $F) = drive(sink => $sink, table => $t, target => $h, xacts => $xacts, restart => $o{restart});
	my $copy_from = $F - 1;

	# the expected history: the state at F - 1 (the copy), then every commit at or after F
	my $at_f = qq{
WITH c AS (SELECT xid::text AS xid, (start_lsn - '0/0'::pg_lsn)::bigint AS lsn
           FROM pg_get_wal_records_info('$wal_from', pg_current_wal_flush_lsn())
           WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT'),
     a AS (SELECT DISTINCT ON (key, xid) key, xid, op, img FROM audit_$t ORDER BY key, xid, seq DESC),
     t AS (SELECT a.key, c.lsn, a.op, a.img FROM a JOIN c USING (xid)),
     s AS (SELECT key, -1::bigint AS lsn, 'U' AS op, img FROM snap_$t UNION ALL SELECT * FROM t),
     f AS (SELECT DISTINCT ON (key) key, op, img FROM s WHERE lsn < $F ORDER BY key, lsn DESC),
     t2 AS (SELECT key, $copy_from AS lsn, op, img FROM f UNION ALL SELECT * FROM t WHERE lsn >= $F)};
	my @exp = split /\n/, $src->safe_psql($DB, qq{$at_f,
     v AS (SELECT key, lsn AS vf, lead(lsn) OVER (PARTITION BY key ORDER BY lsn) AS vt, op, img FROM t2)
SELECT key || '|' || vf || '|' || coalesce(vt::text, '-') || '|' || img FROM v WHERE op = 'U'
ORDER BY key COLLATE "C", vf});
	my $present_at_f = $src->safe_psql($DB, "$at_f SELECT count(*) FROM f WHERE op = 'U'");
	my @act = split /\n/, $dst->safe_psql($DB, qq{
SELECT id::text || '|' || valid_from_lsn || '|' || coalesce(valid_to_lsn::text, '-') || '|' || md5(row(grp, val, big)::text)
FROM $h ORDER BY id::text COLLATE "C", valid_from_lsn});
	is(scalar(@act), scalar(@exp), "$sink: one version per row the copy saw plus one per later committed change of a present key");
	my %e = map { $_ => 1 } @exp;
	my %a = map { $_ => 1 } @act;
	my @missing = grep { !$a{$_} } @exp;
	my @extra = grep { !$e{$_} } @act;
	ok(!@missing && !@extra, "$sink: history (keys, windows, contents) equals the copy plus the source changes")
	  or diag "missing: @missing[0 .. ($#missing < 5 ? $#missing : 5)]\nextra: @extra[0 .. ($#extra < 5 ? $#extra : 5)]";

	ok($present_at_f > $n / 2, "$sink: the copy saw the existing rows ($present_at_f)");
	is($dst->safe_psql($DB, "SELECT count(*) FROM $h WHERE valid_from_lsn = $copy_from"), $present_at_f,
		"$sink: the copy opened exactly one version per row it saw, at its snapshot position - 1");
	is($dst->safe_psql($DB, "SELECT count(*) FROM $h WHERE valid_from_lsn < $copy_from"), '0',
		"$sink: no version starts below the copy's");
	is($dst->safe_psql($DB, qq{SELECT md5(coalesce(string_agg(row(id, grp, val, big)::text, E'\\n' ORDER BY id), '')) || count(*) FROM $h WHERE valid_to_lsn IS NULL}),
		$src->safe_psql($DB, qq{SELECT md5(coalesce(string_agg(row(id, grp, val, big)::text, E'\\n' ORDER BY id), '')) || count(*) FROM $t}),
		"$sink: the open versions are exactly the source rows (one each)");
	is($dst->safe_psql($DB, qq{SELECT count(*) FROM $h h WHERE h.valid_from_lsn = $copy_from AND h.valid_to_lsn IS NOT NULL
		AND h.valid_to_lsn <= h.valid_from_lsn}), '0', "$sink: a copied version closes later than it opened");
	ok($dst->safe_psql($DB, qq{SELECT count(*) FROM $h h JOIN $h n ON n.id = h.id AND n.valid_from_lsn = h.valid_to_lsn
		WHERE h.valid_from_lsn = $copy_from}) > 0, "$sink: later updates closed copied versions and opened the next");
	# keys deleted (or moved away by a key change) for good
	my $gone = $src->safe_psql($DB, qq{SELECT string_agg(DISTINCT key, ',') FROM audit_$t a
		WHERE op = 'D' AND NOT EXISTS (SELECT 1 FROM $t WHERE id::text = a.key)});
	ok(length($gone) > 0, "$sink: the workload deleted keys");
	is($dst->safe_psql($DB, "SELECT count(*) FILTER (WHERE valid_to_lsn IS NULL) FROM $h WHERE id IN ($gone)"),
		'0', "$sink: deletes closed the open version");
	snapshot_complete($sink, 2);
}

sub append_case
{
	my (%o) = @_;
	my ($sink, $t, $n) = @o{qw(sink table rows)};
	stamp($sink);
	my $lg = "${t}_log";
	my $structural = AshTest::append_log_columns();
	my $axes = 'UNIQUE (' . AshTest::append_log_axes() . ')';
	my $mk = AshTest::marker_table($sink);
	$src->safe_psql($DB, qq{
CREATE TABLE $t (id integer PRIMARY KEY, grp integer, val text, big text);
ALTER TABLE $t REPLICA IDENTITY FULL;
ALTER TABLE $t ALTER COLUMN big SET STORAGE EXTERNAL;
INSERT INTO $t SELECT g, CASE WHEN g % 6 = 0 THEN NULL ELSE g % 10 END, 'e' || g,
	CASE WHEN g % 100 = 7 THEN @{[ big_sql("'ev' || g") ]} WHEN g % 9 = 0 THEN NULL ELSE 'small' END
	FROM generate_series(1, $n) g;
CREATE TABLE $mk (id bigint PRIMARY KEY, note text);
ALTER TABLE $mk REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_$sink FOR TABLE $t, $mk;
CREATE TABLE snap_$t AS SELECT id, md5(row(grp, val, big)::text) AS img FROM $t;
-- one row per change in order; 'gone' (no event) marks the old key of a key change
CREATE TABLE audit_$t (seq bigserial PRIMARY KEY, xid text, op text, id integer, img text);
CREATE FUNCTION audit_${t}_fn() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO audit_$t (xid, op, id, img) VALUES (pg_current_xact_id()::text, 'delete', OLD.id, md5(row(OLD.grp, OLD.val, OLD.big)::text));
	ELSE
		IF TG_OP = 'UPDATE' AND OLD.id <> NEW.id THEN
			INSERT INTO audit_$t (xid, op, id) VALUES (pg_current_xact_id()::text, 'gone', OLD.id);
		END IF;
		INSERT INTO audit_$t (xid, op, id, img) VALUES (pg_current_xact_id()::text, lower(TG_OP), NEW.id, md5(row(NEW.grp, NEW.val, NEW.big)::text));
	END IF;
	RETURN NULL;
END \$\$;
CREATE TRIGGER audit_$t AFTER INSERT OR UPDATE OR DELETE ON $t FOR EACH ROW EXECUTE FUNCTION audit_${t}_fn();
});
	$dst->safe_psql($DB, qq{
CREATE TABLE $lg ($structural, id integer, grp integer, val text, big text, $axes);
CREATE TABLE $mk ($structural, id bigint, note text, $axes);
} . ($o{restart} ? brake_sql($lg, 250, 1000) : ''));
	for my $stmt (
		"SELECT ash_replicant_create_sink('$sink', sink_kind => 'append_log', initial_state => 'snapshot')",
		"SELECT ash_replicant_map_table('$sink', '$lg'::regclass, source_table => '$t', append_log => true)",
		"SELECT ash_replicant_map_table('$sink', '$mk'::regclass, append_log => true)",
		"SELECT ash_replicant_configure_pipeline('$sink', '$conn', publication => 'pub_$sink',"
		  . " source_system_identifier => '$sysid', source_database => '$sdb', census => '{\"interval_ms\": 1000}', $V1)",
		"SELECT ash_replicant_start('$sink')")
	{
		my ($rc, $out, $err) = $dst->psql($DB, $stmt);
		BAIL_OUT("$sink setup failed: " . substr($stmt, 0, 60) . ": $err") if $rc;
	}
	my $xacts = gen_workload(xacts => 60, ids => [ 1 .. $n ], next => $n + 10001,
		ins => sub { my ($i) = @_; "INSERT INTO $t VALUES ($i, $i % 5, 'new $i', " . ($i % 3 ? 'NULL' : big_sql("'i$i'")) . ")" },
		upd => sub { my ($i) = @_; "UPDATE $t SET val = md5(coalesce(val, '')), grp = coalesce(grp, 0) + 1 WHERE id = $i" },
		big => sub { my ($i) = @_; "UPDATE $t SET big = " . big_sql("'b$i' || random()") . " WHERE id = $i" },
		del => sub { my ($i) = @_; "DELETE FROM $t WHERE id = $i" },
		pk  => sub { my ($i, $to) = @_; "UPDATE $t SET id = $to WHERE id = $i" });
	my ($wal_from, $S, $F) = drive(sink => $sink, table => $t, target => $lg, xacts => $xacts, restart => $o{restart});

	my $attempt = $dst->safe_psql($DB, AshTest::checkpoint_sql($sink, "encode(c.snapshot_attempt, 'hex')"));
	ok(length($attempt) == 32, "$sink: the checkpoint records a 128-bit snapshot attempt");
	my $c = qq{WITH c AS (SELECT xid::text AS xid, (start_lsn - '0/0'::pg_lsn)::bigint AS lsn
           FROM pg_get_wal_records_info('$wal_from', pg_current_wal_flush_lsn())
           WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT')};
	# the rows at F: the state before the start, changed by every commit below F
	my $at_f = qq{$c,
     s AS (SELECT id, -1::bigint AS lsn, 0::bigint AS seq, 'insert' AS op, img FROM snap_$t
           UNION ALL SELECT a.id, c.lsn, a.seq, a.op, a.img FROM audit_$t a JOIN c USING (xid)),
     f AS (SELECT DISTINCT ON (id) id, op, img FROM s WHERE lsn < $F ORDER BY id, lsn DESC, seq DESC)};
	my $nf = $src->safe_psql($DB, "$at_f SELECT count(*) FROM f WHERE op IN ('insert', 'update')");
	ok($nf > $n / 2, "$sink: the copy saw the existing rows ($nf)");
	is($dst->safe_psql($DB, qq{SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || count(DISTINCT snapshot_attempt)
		|| ' ' || count(*) FILTER (WHERE snapshot_attempt IS NULL) FROM $lg WHERE operation = 'snapshot'}),
		"$nf $nf 1 0", "$sink: one snapshot event per row the copy saw, one non-NULL attempt for all");
	is($dst->safe_psql($DB, qq{SELECT count(*) FROM $lg WHERE operation = 'snapshot' AND NOT (
		origin = 'snapshot' AND commit_lsn = $F - 1 AND encode(snapshot_attempt, 'hex') = '$attempt'
		AND source_system_id = '$sysid' AND source_database = '$sdb' AND slot_name = '$sink')}),
		'0', "$sink: snapshot events: origin snapshot, at the copy's position - 1, the checkpoint's attempt, the identity axes");
	is($dst->safe_psql($DB, qq{SELECT min(ordinal) || '-' || max(ordinal) || ' ' || count(DISTINCT ordinal) FROM $lg WHERE operation = 'snapshot'}),
		"1-$nf $nf", "$sink: snapshot ordinals are 1..N");
	is($dst->safe_psql($DB, qq{SELECT md5(string_agg(id || ':' || md5(row(grp, val, big)::text), ',' ORDER BY id)) FROM $lg WHERE operation = 'snapshot'}),
		$src->safe_psql($DB, qq{$at_f SELECT md5(string_agg(id || ':' || img, ',' ORDER BY id)) FROM f WHERE op IN ('insert', 'update')}),
		"$sink: the snapshot events carry exactly the rows of the copy's snapshot");
	is($dst->safe_psql($DB, qq{SELECT count(*) FROM $lg WHERE operation <> 'snapshot' AND (origin <> 'stream' OR snapshot_attempt IS NOT NULL)}),
		'0', "$sink: every other event is of origin stream, without an attempt");
	is($dst->safe_psql($DB, qq{SELECT count(*) FROM $lg WHERE origin = 'snapshot' AND operation <> 'snapshot'}),
		'0', "$sink: origin snapshot only on snapshot events");
	my @expected = split /\n/, $src->safe_psql($DB, qq{$c,
     t AS (SELECT c.lsn, row_number() OVER (PARTITION BY a.xid ORDER BY a.seq) AS ordinal, a.op, a.id, a.img
           FROM audit_$t a JOIN c USING (xid) WHERE a.op <> 'gone')
SELECT lsn || '|' || ordinal || '|' || op || '|' || id || '|' || img FROM t WHERE lsn >= $F ORDER BY 1});
	my @actual = split /\n/, $dst->safe_psql($DB, qq{
SELECT commit_lsn || '|' || ordinal || '|' || operation || '|' || coalesce(id::text, '-') || '|' || md5(row(grp, val, big)::text)
FROM $lg WHERE operation <> 'snapshot' ORDER BY 1});
	is(scalar(@actual), scalar(@expected), "$sink: one stream event per source change at or after the copy's position (count)");
	my %e = map { $_ => 1 } @expected;
	my %a = map { $_ => 1 } @actual;
	my @missing = grep { !$a{$_} } @expected;
	my @extra = grep { !$e{$_} } @actual;
	ok(@expected >= 10 && !@missing && !@extra, "$sink: stream events (position, ordinal, operation, row image) equal the source changes")
	  or diag "missing: @missing[0 .. ($#missing < 5 ? $#missing : 5)]\nextra: @extra[0 .. ($#extra < 5 ? $#extra : 5)]";
	snapshot_complete($sink, 2);
}

scd2_case(sink => 'sh', table => 'acct', rows => $NROWS);
append_case(sink => 'sl', table => 'ev', rows => $NROWS);
scd2_case(sink => 'sh2', table => 'acct2', rows => 30000, restart => 1);
append_case(sink => 'sl2', table => 'ev2', rows => 30000, restart => 1);

# ===========================================================================
# sk: kill -9 of the destination in the middle of a large table's copy
# ===========================================================================
stamp('sk');
my $NBIG = 300_000;
$src->safe_psql($DB, qq{
CREATE TABLE big (id integer PRIMARY KEY, v text, pad text);
INSERT INTO big SELECT g, CASE WHEN g % 97 = 0 THEN NULL ELSE 'v' || g END, md5(g::text) FROM generate_series(1, $NBIG) g;
ANALYZE big;
CREATE PUBLICATION pub_sk FOR TABLE big;
CREATE TABLE audit_big (seq bigserial PRIMARY KEY, xid text, op text, id integer);
CREATE FUNCTION audit_big_fn() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.id <> NEW.id) THEN
		INSERT INTO audit_big (xid, op, id) VALUES (pg_current_xact_id()::text, 'D', OLD.id);
	END IF;
	IF TG_OP <> 'DELETE' THEN
		INSERT INTO audit_big (xid, op, id) VALUES (pg_current_xact_id()::text, 'W', NEW.id);
	END IF;
	RETURN NULL;
END \$\$;
CREATE TRIGGER audit_big AFTER INSERT OR UPDATE OR DELETE ON big FOR EACH ROW EXECUTE FUNCTION audit_big_fn();
});
my $wal_from_sk = $src->safe_psql($DB, 'SELECT pg_current_wal_lsn()');
$dst->safe_psql($DB, q{
CREATE TABLE big (id integer PRIMARY KEY, v text, pad text);
-- a brake: every 1000th copied row sleeps until released, so the copy lasts
CREATE TABLE brake (ms integer NOT NULL);
INSERT INTO brake VALUES (25);
CREATE FUNCTION brake_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_sleep(ms / 1000.0) FROM brake;
	RETURN NULL;
END $$;
CREATE TRIGGER big_brake AFTER INSERT ON big FOR EACH ROW WHEN (NEW.id % 1000 = 0) EXECUTE FUNCTION brake_fn();
} . AshTest::write_audit_sql('big', 'integer'));
my @big_ids = map { 1 + int(rand($NBIG)) } 1 .. 400;
my %seen;
@big_ids = grep { !$seen{$_}++ } @big_ids;
my %touched_sk;
my $wl_sk = gen_workload(xacts => 60, ids => \@big_ids, next => $NBIG + 1, touched => \%touched_sk,
	ins => sub { my ($i) = @_; "INSERT INTO big VALUES ($i, 'late $i', NULL)" },
	upd => sub { my ($i) = @_; "UPDATE big SET v = coalesce(v, 'null') || '+', pad = NULL WHERE id = $i" },
	del => sub { my ($i) = @_; "DELETE FROM big WHERE id = $i" },
	pk  => sub { my ($i, $to) = @_; "UPDATE big SET id = $to WHERE id = $i" });
# spread the workload over the copy and the crash
s/COMMIT;\n/COMMIT;\nSELECT pg_sleep(0.05);\n/ for @$wl_sk;

AshTest::setup_pipeline($src, $dst, sink => 'sk', publication => 'pub_sk', pipeline_extra => $V1,
	maps => [ ['big'] ]);
$w = run_workload($wl_sk);
ok(AshTest::poll($dst, q{SELECT count(*) = 1 FROM ash_replicant.stat_snapshot_tables
	WHERE sink_name = 'sk' AND source_table = 'big' AND state = 'copying' AND rows_copied > 0}, 't', timeout => 60),
	'sk: the copy of big is under way');
my $copied_before = $dst->safe_psql($DB, q{SELECT rows_copied FROM ash_replicant.stat_snapshot_tables WHERE sink_name = 'sk' AND source_table = 'big'});
note "kill -9 of the destination with $copied_before rows of big copied";
AshTest::crash_restart($dst);
is($dst->safe_psql($DB, q{SELECT state || ' ' || rows_copied FROM ash_replicant.snapshot_tables WHERE slot_name = 'sk' AND source_table = 'big'}),
	'pending 0', 'sk: after the crash, nothing of the interrupted copy stayed (the table is pending)');
is($dst->safe_psql($DB, 'SELECT (SELECT count(*) FROM big) || \' \' || (SELECT count(*) FROM big_audit)'), '0 0',
	'sk: after the crash, the target holds no row of the interrupted copy');
$dst->safe_psql($DB, 'UPDATE brake SET ms = 0');
ok(AshTest::finish_workload($w), 'sk: concurrent source writes done');
AshTest::wait_caught_up($src, $dst, 'sk', name => 'sk: caught up after the crash', timeout => 180);
AshTest::assert_mirror_equal($src, $dst, ['big'], name => 'sk: after a crash mid-copy');
is($dst->safe_psql($DB, q{SELECT count(*) FROM (SELECT id FROM big_audit WHERE op = 'INSERT' GROUP BY id HAVING count(*) > 1) x}),
	'0', 'sk: no key inserted twice (audit)');
is($dst->safe_psql($DB, q{SELECT count(*) FROM big b WHERE NOT EXISTS (SELECT 1 FROM big_audit a WHERE a.id = b.id)}),
	'0', 'sk: every mirrored key was written through the audited apply');
{
	my $untouched = "id <> ALL ('{" . join(',', sort { $a <=> $b } keys %touched_sk) . "}'::integer[])";
	my $n = $NBIG - grep({ $_ <= $NBIG } keys %touched_sk);
	is($dst->safe_psql($DB, "SELECT count(*) || ' ' || count(*) FILTER (WHERE n = 1 AND ins) FROM"
			  . " (SELECT id, count(*) AS n, bool_and(op = 'INSERT') AS ins FROM big_audit WHERE $untouched GROUP BY id) x"),
		"$n $n", 'sk: every row the workload did not touch was written exactly once, by one insert');
}
is($dst->safe_psql($DB, q{SELECT (t.snapshot_lsn > c.snapshot_lsn)::text FROM ash_replicant.snapshot_tables t
	JOIN ash_replicant.checkpoints c USING (source_system_id, source_database, slot_name)
	WHERE t.slot_name = 'sk' AND t.source_table = 'big'}),
	'true', 'sk: big was re-copied under a snapshot taken after the crash');
AshTest::assert_writes_bounded($src, $dst, label => 'sk', src_audit => 'audit_big', dst_audit => 'big_audit', wal_from => $wal_from_sk,
	initial => $NBIG, F => $dst->safe_psql($DB, q{SELECT (snapshot_lsn - '0/0'::pg_lsn)::bigint FROM ash_replicant.snapshot_tables
		WHERE slot_name = 'sk' AND source_table = 'big'}));
snapshot_complete('sk', 2);

# the other sinks lived through the crash
for my $s (qw(sa sc se sh sl sh2 sl2))
{
	AshTest::wait_caught_up($src, $dst, $s, name => "$s: still streaming after the crash");
}
AshTest::assert_mirror_equal($src, $dst, ['acc'], name => 'sa: after the crash');

stamp('end');
done_testing();
