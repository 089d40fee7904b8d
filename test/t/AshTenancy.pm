# AshTenancy — helpers of the tenancy / sensitive-column TAP tests (040-044),
# on top of the shared harness AshTest.pm.
#
#   use lib 'test/t';
#   use AshTest;
#   use AshTenancy;
#
# What is here
#   - sentinel()                 a unique, greppable value
#   - write_keyring()            an atomic, mode-0600 keyring file in a data dir
#   - state() / assert_unchanged()  "a halt leaves mirror and checkpoint
#                                unchanged": content hashes of the given
#                                destination tables plus the checkpoint row
#   - expect_halt()              wait for a halt with its reason, then assert
#                                the state is unchanged and the tombstone names
#                                the reason
#   - restart_and_expect_halt()  ash_replicant_start again without a fix: the
#                                same halt, still nothing applied
#   - assert_same()              compare a source query with a destination
#                                table (per tenant / per tenant schema)
#   - assert_no_leak()           grep every log file of the test (both nodes,
#                                every file of the log directory but the test's
#                                own transcript), status, stat view, catalogs
#                                and the error texts the test got
package AshTenancy;

use strict;
use warnings;

use Carp;
use File::Basename;
use PostgreSQL::Test::Utils;
use Test::More;
use AshTest;

my $DB = 'postgres';

sub sentinel
{
	return 'SENTINEL_' . join('', map { sprintf '%02x', int(rand(256)) } 1 .. 12);
}

# write_keyring($node, $name, @lines): "$datadir/$name", mode 0600, replaced
# atomically (rename), owned by whoever runs the test (= the server user).
sub write_keyring
{
	my ($node, $name, @lines) = @_;
	my $path = $node->data_dir . "/$name";
	my $tmp = "$path.tmp";
	open(my $fh, '>', $tmp) or croak "cannot write $tmp: $!";
	print $fh map { "$_\n" } @lines;
	close($fh);
	chmod(0600, $tmp) or croak "chmod $tmp: $!";
	rename($tmp, $path) or croak "rename $tmp: $!";
	return $path;
}

# 64 hex digits, deterministic per seed (distinctive, never all zero)
sub key_hex
{
	my ($seed) = @_;
	return join '', map { sprintf '%02x', ($_ * 29 + $seed * 83 + 7) % 256 } 0 .. 31;
}

##############################################################################
# Unchanged state
##############################################################################

# state($dst, $sink, @tables): destination content hashes and the checkpoint
# (watermark, end LSN), in one round trip.  Rows are ordered by their text, so
# the hash is deterministic whatever the table's key.
sub state
{
	my ($dst, $sink, @tables) = @_;
	my @parts = map {
		"SELECT " . AshTest::lit($_) . " || '|' || md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), ''))"
		  . " || ' ' || count(*) FROM $_ t"
	} @tables;
	push @parts, "SELECT 'checkpoint|' || coalesce(("
	  . AshTest::checkpoint_sql($sink, "c.commit_lsn::text || ' ' || coalesce(c.end_lsn::text, '-')")
	  . "), '(none)')";
	my $out = $dst->safe_psql($DB,
		"SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET extra_float_digits = 3;\n"
		  . join("\nUNION ALL\n", map { "($_)" } @parts));
	my %h;
	for my $line (split /\n/, $out)
	{
		my ($k, $v) = split /\|/, $line, 2;
		$h{$k} = $v;
	}
	my $cp = delete $h{checkpoint};
	return { tables => \%h, checkpoint => $cp };
}

sub assert_unchanged
{
	my ($dst, $sink, $before, $label) = @_;
	my $now = state($dst, $sink, sort keys %{ $before->{tables} });
	for my $t (sort keys %{ $before->{tables} })
	{
		is($now->{tables}{$t}, $before->{tables}{$t}, "$label: $t unchanged");
	}
	is($now->{checkpoint}, $before->{checkpoint}, "$label: checkpoint unchanged");
	return;
}

# expect_halt($src, $dst, $sink, $reason, $before, %o)
#   state => 'halted' | 'misconfigured' ['halted'], label
sub expect_halt
{
	my ($src, $dst, $sink, $reason, $before, %o) = @_;
	my $label = $o{label} // "$sink $reason";
	my $state = $o{state} // 'halted';
	my ($gs, $gr) = AshTest::wait_status($dst, $sink, $state, $reason, src => $src,
		name => "$label: $state/$reason");
	assert_unchanged($dst, $sink, $before, $label) if $before;
	my $row = AshTest::checkpoint_row($dst, $sink);
	if ($row)
	{
		is($row->{terminal_cause}, $reason, "$label: tombstone names the reason");
	}
	else
	{
		# refused before binding: no checkpoint row, so the skip is lawful
		# (README.md#how-apply-works); the halt is recorded on the pipeline
		is($dst->safe_psql('postgres',
				"SELECT halt_reason FROM ash_replicant.pipelines WHERE sink_name = '$sink'"),
			$reason, "$label: halt recorded (refused before any checkpoint existed)");
	}
	return ($gs, $gr);
}

# Start again without fixing anything: the same halt, nothing applied.
sub restart_and_expect_halt
{
	my ($src, $dst, $sink, $reason, $before, %o) = @_;
	my $label = $o{label} // "$sink $reason";
	my $err = AshTest::start_sink($dst, $sink);
	expect_halt($src, $dst, $sink, $reason, $before, %o, label => "$label (restarted, not fixed)");
	return $err;
}

# Halt events of a sink with a reason, from the destination log.
sub halt_events
{
	my ($dst, $sink, $reason) = @_;
	return AshTest::log_lines_like($dst,
		qr/event=pipeline\.halt sink=\Q$sink\E reason=\Q$reason\E\b/);
}

##############################################################################
# Comparing
##############################################################################

# assert_same($src, $src_table, $src_where, $dst, $dst_table, $name, %o):
# rows of the source table (filtered) equal the destination table, by content
# hash over the row text ordered by $o{order_by} ['id'].
sub assert_same
{
	my ($src, $st, $where, $dst, $dt, $name, %o) = @_;
	my $ord = $o{order_by} // 'id';
	my $hs = AshTest::table_hash($src, $st, $ord, $where);
	my $hd = AshTest::table_hash($dst, $dt, $ord, $o{dst_where});
	my $ok = is($hd, $hs, $name);
	unless ($ok)
	{
		my $rs = AshTest::table_rows($src, $st, $ord, $where, 50);
		my $rd = AshTest::table_rows($dst, $dt, $ord, $o{dst_where}, 50);
		diag "source ($st" . ($where ? " WHERE $where" : '') . "):\n  " . join("\n  ", @$rs);
		diag "destination ($dt):\n  " . join("\n  ", @$rd);
	}
	return $ok;
}

##############################################################################
# Leaks
##############################################################################

# Every server log file of the nodes: each node's logfile, every file of the
# TAP log directory except the test's own transcripts (regress_log_*), and
# any log/ or pg_log/ directory in the data directories.
sub log_files
{
	my (@nodes) = @_;
	my %f;
	for my $node (@nodes)
	{
		$f{$_} = 1 for AshTest::log_files($node);
		for my $d ($node->data_dir . '/log', $node->data_dir . '/pg_log')
		{
			next unless -d $d;
			$f{$_} = 1 for grep { -f $_ } glob("$d/*");
		}
	}
	my $dir = $PostgreSQL::Test::Utils::log_path;
	if ($dir && -d $dir)
	{
		for my $p (glob("$dir/*"))
		{
			next unless -f $p;
			next if basename($p) =~ /^regress_log_/;
			$f{$p} = 1;
		}
	}
	return sort keys %f;
}

# Every line of every log file containing one of the needles.
sub grep_all_logs
{
	my ($needles, @nodes) = @_;
	my @hits;
	for my $f (log_files(@nodes))
	{
		my $text = slurp_file($f);
		for my $n (@$needles)
		{
			next if index($text, $n) < 0;
			push @hits, map { basename($f) . ": $_" } grep { index($_, $n) >= 0 } split /\n/, $text;
		}
	}
	return @hits;
}

# What the destination says about itself: status, stat view, catalogs.
sub destination_text
{
	my ($dst) = @_;
	my $keys = eval { $dst->safe_psql($DB, 'SELECT row_to_json(x)::text FROM ash_replicant_keyring_status() x') }
	  // "($@)";
	return AshTest::catalog_text($dst) . "\n" . $keys;
}

# assert_no_leak($needles, [nodes], [extra texts], $label)
sub assert_no_leak
{
	my ($needles, $nodes, $extra, $label) = @_;
	my @hits = grep_all_logs($needles, @$nodes);
	is(scalar(@hits), 0, "$label: in no log file of either node")
	  or diag join("\n", @hits[ 0 .. ($#hits < 9 ? $#hits : 9) ]);
	my $dst = $nodes->[-1];
	my $cat = destination_text($dst);
	my @in_cat = grep { index($cat, $_) >= 0 } @$needles;
	is(scalar(@in_cat), 0, "$label: not in status, stat_pipelines, keyring status or catalogs");
	my @in_err = grep { my $t = $_ // ''; grep { index($t, $_) >= 0 } @$needles } @$extra;
	is(scalar(@in_err), 0, "$label: not in any message the test's own calls got")
	  or diag join("\n", @in_err);
	return;
}

1;
