# README.md "Quick start: mirror existing tables", followed literally.
#
# The section's marked blocks are extracted from README.md and run in order
# against a fresh source and destination:
#
#   <!-- qs:source -->              ```sql on the source, database app, as superuser
#   <!-- qs:source-hba -->          a pg_hba.conf line of the source (put first)
#   <!-- qs:shell [capture=VAR] [exit=N] -->
#                                   ```sh in bash, as the destination's OS user,
#                                   psql reaching the destination by default;
#                                   capture=VAR: its output replaces VAR in
#                                   later blocks; exit=N: the exit status it
#                                   must have (default 0)
#   <!-- qs:dest -->                ```sql on the destination, database postgres
#   <!-- qs:expect -->              the previous block's output, as printed
#   <!-- qs:expect-eventually -->   the same, once the previous block, repeated,
#                                   prints it
#
# Only the placeholders the section documents are replaced: SOURCE_HOST,
# SOURCE_PORT, DEST_ADDR, SOURCE_SYSTEM_ID (captured) and the passfile path
# /var/lib/postgresql/.pgpass (a file of the test).  Outputs are compared
# line by line with runs of blanks and of dashes collapsed; an LSN in an
# expected output stands for any LSN.  A README change that breaks a command
# or changes what it prints fails this test.
#
# Around the README's own claims, the test checks what a reader cannot see:
# the role has no more than the README grants and needs its password (the
# source's pg_hba.conf trusts every other connection of the test), the halt
# committed nothing, and after the recovery the mirror equals the source row
# for row.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

my ($src, $dst) = AshTest::start_pair();
$src->safe_psql('postgres', 'CREATE DATABASE app');

my $home = tempdir(CLEANUP => 1);
my $bindir = `pg_config --bindir`;
chomp $bindir;
my %subst = (
	SOURCE_HOST => '127.0.0.1',
	SOURCE_PORT => $src->port,
	DEST_ADDR => '127.0.0.1/32',
	'/var/lib/postgresql/.pgpass' => "$home/.pgpass");

# --- the section and its blocks ---------------------------------------------
my $readme = slurp_file('README.md');
my ($section) = $readme =~ /^## Quick start: mirror existing tables\n(.*?)(?=^## )/ms;
ok(defined $section, 'README.md has the section "Quick start: mirror existing tables"')
  or BAIL_OUT('no quick start section');

my @steps;
while ($section =~ /<!-- qs:(\S+)((?:\s+\w+=\S+)*)\s*-->\s*\n```[a-z]*\n(.*?)^```\s*$/gms)
{
	my ($kind, $attrs, $body) = ($1, $2, $3);
	my %a = $attrs =~ /(\w+)=(\S+)/g;
	push @steps, { kind => $kind, body => $body, %a };
}
my %kinds = map { $_->{kind} => 1 } @steps;
is(join(',', sort keys %kinds), 'dest,expect,expect-eventually,shell,source,source-hba',
	'the section marks blocks of every kind, and no unknown kind');
for my $ph (sort keys %subst, 'SOURCE_SYSTEM_ID')
{
	ok(index($section, $ph) >= 0, "the section uses the placeholder $ph");
}

# --- running a block ----------------------------------------------------------
sub substituted
{
	my ($text) = @_;
	for my $k (sort { length($b) <=> length($a) } keys %subst)
	{
		$text =~ s/\Q$k\E/$subst{$k}/g;
	}
	return $text;
}

# run a block; returns (exit status, stdout, stderr)
sub run_block
{
	my ($step) = @_;
	my $body = substituted($step->{body});
	my ($out, $err) = ('', '');
	local %ENV = %ENV;
	delete $ENV{$_} for qw(PGDATABASE PGUSER PGPASSFILE PGSERVICE PGOPTIONS);
	$ENV{HOME} = $home;
	$ENV{PATH} = "$bindir:$ENV{PATH}";
	my @cmd;
	if ($step->{kind} eq 'source')
	{
		@cmd = ('psql', '-X', '-v', 'ON_ERROR_STOP=1', '-h', $src->host, '-p', $src->port, '-d', 'app');
	}
	elsif ($step->{kind} eq 'dest')
	{
		@cmd = ('psql', '-X', '-v', 'ON_ERROR_STOP=1', '-h', $dst->host, '-p', $dst->port, '-d', 'postgres');
	}
	else
	{
		# the destination host's shell: psql reaches the destination by default
		$ENV{PGHOST} = $dst->host;
		$ENV{PGPORT} = $dst->port;
		@cmd = ('bash', '-e', '-o', 'pipefail', '-c', $body);
		$body = '';
	}
	IPC::Run::run(\@cmd, '<', \$body, '>', \$out, '2>', \$err, IPC::Run::timeout(300));
	return ($? >> 8, $out, $err);
}

# compare printed output with the README's, blanks and dashes collapsed, any LSN for an LSN
sub normalized
{
	my ($text) = @_;
	my @lines;
	for my $l (split /\n/, $text)
	{
		$l =~ s/^\s+|\s+$//g;
		$l =~ s/\s+/ /g;
		$l =~ s/-+/-/g;
		push @lines, $l if length $l;
	}
	return @lines;
}

sub output_matches
{
	my ($got, $want) = @_;
	my @g = normalized($got);
	my @w = normalized($want);
	return 0 unless @g == @w;
	for my $i (0 .. $#w)
	{
		my $re = join('', map { m{^[0-9A-F]+/[0-9A-F]+;?$} ? '[0-9A-F]+/[0-9A-F]+' . (/;$/ ? ';' : '') : quotemeta($_) }
			  split /(\s)/, $w[$i]);
		return 0 unless $g[$i] =~ /^$re$/;
	}
	return 1;
}

# the same rows at both ends (the source's tables are in database app)
sub mirror_equal
{
	my ($name) = @_;
	for my $t ('public.customers', 'public.orders')
	{
		my $hs = do { local $AshTest::DB = 'app'; AshTest::table_hash($src, $t, 'id') };
		my $hd = AshTest::table_hash($dst, $t, 'id');
		is($hd, $hs, "$name: $t");
	}
}

# --- what a reader cannot see: checked at the steps they belong to ------------------
my $copied = 0;
my %after_expect = (
	# the copy is complete: the mirror equals the source, row for row
	qr/\bhealthy\b/ => sub {
		mirror_equal('after the snapshot, the mirror equals the source') unless $copied++;
	},
	# the halt committed nothing of the failed transaction
	qr/\bapply_failed\b/ => sub {
		is($dst->safe_psql('postgres', 'SELECT count(*) FROM public.orders WHERE id = 20001'), '0',
			'the halted transaction left nothing in the mirror');
	});

# --- follow the section --------------------------------------------------------
my $n = 0;
my $last;         # the last block run, for an expect
my $last_out;
for my $step (@steps)
{
	$n++;
	my $k = $step->{kind};
	my $label = "step $n ($k)";
	if ($k eq 'source-hba')
	{
		my $line = substituted($step->{body});
		my $hba = $src->data_dir . '/pg_hba.conf';
		my $old = slurp_file($hba);
		open my $fh, '>', $hba or die "$hba: $!";
		print $fh "$line\n$old";
		close $fh;
		$src->reload;
		pass("$label: the source's pg_hba.conf starts with the README's line");
		next;
	}
	if ($k eq 'expect' || $k eq 'expect-eventually')
	{
		my $ok = output_matches($last_out, $step->{body});
		if (!$ok && $k eq 'expect-eventually')
		{
			my $deadline = time + $AshTest::WAIT_TIMEOUT;
			while (!$ok && time < $deadline)
			{
				usleep(250_000);
				my ($rc, $out, $err) = run_block($last);
				$last_out = $out;
				$ok = $rc == 0 && output_matches($last_out, $step->{body});
			}
		}
		ok($ok, "$label: the output is what the README shows")
		  or diag "got:\n$last_out\nREADME:\n$step->{body}";
		for my $re (keys %after_expect)
		{
			$after_expect{$re}->() if $ok && $step->{body} =~ $re;
		}
		next;
	}
	my ($rc, $out, $err) = run_block($step);
	my $want = $step->{exit} // 0;
	is($rc, $want, "$label: exits $want") or diag "stdout:\n$out\nstderr:\n$err";
	if (my $var = $step->{capture})
	{
		(my $v = $out) =~ s/^\s+|\s+$//g;
		like($v, qr/^\d+$/, "$label: prints $var");
		$subst{$var} = $v;
	}
	($last, $last_out) = ($step, $out);
}

# --- the role: what the README grants, and its password is needed ------------------
is($src->safe_psql('app', q{
	SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls OR NOT rolreplication
	  OR has_table_privilege('mirror', 'public.orders', 'INSERT, UPDATE, DELETE, TRUNCATE')
	  FROM pg_roles WHERE rolname = 'mirror'}), 'f',
	'the mirror role can replicate and read, nothing more');
{
	my ($out, $err) = ('', '');
	local $ENV{PGPASSFILE} = '/nonexistent';
	IPC::Run::run([ 'psql', '-X', '-w', '-c', 'SELECT 1',
			"host=127.0.0.1 port=" . $src->port . " dbname=app user=mirror" ],
		'>', \$out, '2>', \$err);
	isnt($? >> 8, 0, 'without the password file the mirror role cannot connect');
	like($err, qr/password/, '... it is asked for a password');
}
ok(scalar(grep { $_->{kind} eq 'expect-eventually' && $_->{body} =~ /apply_failed/ } @steps),
	'the section shows the first halt');

# --- after the recovery: the mirror equals the source ---------------------------------
mirror_equal('after the recovery, the mirror equals the source');
is($copied, 2, 'the section reached healthy twice: after the copy and after the recovery');
is(scalar(AshTest::grep_logs_for('change-me', $dst)), 0, 'the password is in no destination log line');

done_testing();
