package console

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/internal/mgr/rolestore"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// NewMgrCommand is the mgr group: norsk-mgr's role store (the console's
// users), kept in the Manager's KV store.
func NewMgrCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("mgr", "norsk-mgr, the operator console: its users and their roles")
	user := cmdutil.NewGroup("user", "The console's users (role store): add, list, remove, passwd")
	user.Long = `The console's users live in the Manager's KV store (namespace ` + rolestore.Namespace + `),
each with an argon2id password hash and one role: admin (everything, users
included), operator (start, stop, migrate, drain, tag, leases) or viewer (reads
only). Every change is published by the active norsk-mgr as the role-store
replica, which the Manager forwards to every worker. A password is read from
--password-file, or from standard input (one line).`
	user.AddCommand(newMgrUserAdd(g), newMgrUserList(g), newMgrUserRemove(g), newMgrUserPasswd(g))
	cmd.AddCommand(user)
	return cmd
}

// readPassword reads the password from file ("-" or "": standard input).
func readPassword(cmd *cobra.Command, file string) (string, error) {
	var r io.Reader = cmd.InOrStdin()
	if file != "" && file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return "", err
		}
		defer f.Close()
		r = f
	} else if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprint(cmd.ErrOrStderr(), "password: ")
		}
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	pw := strings.TrimRight(line, "\r\n")
	if pw == "" {
		return "", errors.New("no password given (--password-file, or one line on standard input)")
	}
	return pw, nil
}

func newMgrUserAdd(g *cmdutil.Globals) *cobra.Command {
	var role, pwFile string
	c := &cobra.Command{
		Use:   "add NAME",
		Short: "Add a console user with a role",
		Args:  cmdutil.ExactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			pw, err := readPassword(cmd, pwFile)
			if err != nil {
				return err
			}
			if _, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (struct{}, error) {
				return struct{}{}, rolestore.New(m).Add(ctx, args[0], role, pw)
			}, "mgr user add %s", args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %s (%s)\n", args[0], role)
			return nil
		},
	}
	c.Flags().StringVar(&role, "role", rolestore.RoleViewer, "admin, operator or viewer")
	c.Flags().StringVar(&pwFile, "password-file", "", "file holding the password (default: standard input)")
	return c
}

func newMgrUserList(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the console's users and their roles",
		Args:  cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*rolestore.State, error) {
				return rolestore.New(m).Read(ctx)
			}, "mgr user list")
			if err != nil {
				return err
			}
			type row struct {
				Name    string `json:"name"`
				Role    string `json:"role"`
				Updated string `json:"updated"`
			}
			rows := []row{}
			for _, u := range st.Users {
				rows = append(rows, row{u.Name, u.Role, u.Updated.Format("2006-01-02 15:04:05Z07:00")})
			}
			data := map[string]any{"version": st.Version, "users": rows}
			return g.Printer().Print(cmdutil.Result{Data: data, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Role store version %d\n\nUSER\tROLE\tUPDATED\n", st.Version)
				for _, r := range rows {
					fmt.Fprintf(w, "%s\t%s\t%s\n", r.Name, r.Role, r.Updated)
				}
			}})
		},
	}
}

func newMgrUserRemove(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a console user (never the last admin)",
		Args:  cmdutil.ExactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (struct{}, error) {
				return struct{}{}, rolestore.New(m).Remove(ctx, args[0])
			}, "mgr user remove %s", args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
			return nil
		},
	}
}

func newMgrUserPasswd(g *cmdutil.Globals) *cobra.Command {
	var pwFile string
	c := &cobra.Command{
		Use:   "passwd NAME",
		Short: "Set a console user's password (their sessions end)",
		Args:  cmdutil.ExactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			pw, err := readPassword(cmd, pwFile)
			if err != nil {
				return err
			}
			if _, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (struct{}, error) {
				return struct{}{}, rolestore.New(m).SetPassword(ctx, args[0], pw)
			}, "mgr user passwd %s", args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "password of %s set\n", args[0])
			return nil
		},
	}
	c.Flags().StringVar(&pwFile, "password-file", "", "file holding the password (default: standard input)")
	return c
}
